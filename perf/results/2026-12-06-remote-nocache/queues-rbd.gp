
set terminal pngcairo size 1280,1040 font ",9"
set output "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.png"
set datafile missing "-"
set key bottom right font ",7"
set xlabel "queues"
set ylabel "kIOPS"
set xtics (1, 4)
set offsets 0.2, 0.2, 0, 0
set yrange [0:*]
set grid
set multiplot layout 4,4 title "rbd driver: IOPS by queue count (median)"
set title "read-aio-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 0 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 0 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 0 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 0 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "write-aio-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 1 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 1 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 1 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 1 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-aio-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 2 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 2 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 2 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 2 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-aio-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 3 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 3 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 3 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 3 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "read-aio-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 4 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 4 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 4 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 4 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "write-aio-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 5 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 5 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 5 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 5 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-aio-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 6 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 6 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 6 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 6 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-aio-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 7 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 7 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 7 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 7 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "read-sync-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 8 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 8 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 8 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 8 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "write-sync-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 9 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 9 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 9 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 9 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-sync-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 10 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 10 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 10 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 10 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-sync-j1"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 11 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 11 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 11 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 11 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "read-sync-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 12 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 12 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 12 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 12 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "write-sync-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 13 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 13 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 13 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 13 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randread-sync-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 14 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 14 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 14 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 14 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"
set title "randwrite-sync-j4"
plot "/work/main/perf/results/2026-12-06-remote-nocache/queues-rbd.dat" index 15 using 1:2 with linespoints lw 2 title "bexd", \
     "" index 15 using 1:3 with linespoints lw 2 dt 2 title "limit", \
     "" index 15 using 1:4 with lines lw 2 dt 3 title "QSD (1 queue)", \
     "" index 15 using 1:5 with linespoints lw 1 dt 4 title "bexd baseline"

unset multiplot
