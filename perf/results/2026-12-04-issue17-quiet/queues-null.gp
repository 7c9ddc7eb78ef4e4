
set terminal pngcairo size 1280,520 font ",9"
set output "perf/results/2026-12-04-issue17-quiet/queues-null.png"
set datafile missing "-"
set key bottom right font ",7"
set xlabel "queues"
set ylabel "kIOPS"
set xtics (1, 2)
set offsets 0.2, 0.2, 0, 0
set yrange [0:*]
set grid
set multiplot layout 2,4 title "null driver: IOPS by queue count (median)"
set title "randread-aio-j1"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 0 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 0 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 0 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 0 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-aio-j1"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 1 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 1 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 1 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 1 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-sync-j1"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 2 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 2 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 2 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 2 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-sync-j1"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 3 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 3 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 3 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 3 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-aio-j4"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 4 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 4 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 4 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 4 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-aio-j4"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 5 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 5 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 5 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 5 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-sync-j4"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 6 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 6 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 6 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 6 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-sync-j4"
plot "perf/results/2026-12-04-issue17-quiet/queues-null.dat" index 7 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 7 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 7 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 7 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"

unset multiplot
