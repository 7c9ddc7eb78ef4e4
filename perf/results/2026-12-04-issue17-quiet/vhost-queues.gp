
set terminal pngcairo size 1280,260 font ",9"
set output "perf/results/2026-12-04-issue17-quiet/vhost-queues.png"
set datafile missing "-"
set key bottom right font ",7"
set xlabel "request rings"
set ylabel "k requests/s"
set xtics (1, 2)
set offsets 0.2, 0.2, 0, 0
set yrange [0:*]
set grid
set multiplot layout 1,4 title "vhost-user-fs export: requests/s by ring count (median)"
set title "randread-aio-j1"
plot "perf/results/2026-12-04-issue17-quiet/vhost-queues.dat" index 0 using 1:2 with linespoints lw 2 title "null", \
     "" index 0 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 0 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randwrite-aio-j1"
plot "perf/results/2026-12-04-issue17-quiet/vhost-queues.dat" index 1 using 1:2 with linespoints lw 2 title "null", \
     "" index 1 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 1 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randread-sync-j1"
plot "perf/results/2026-12-04-issue17-quiet/vhost-queues.dat" index 2 using 1:2 with linespoints lw 2 title "null", \
     "" index 2 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 2 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randwrite-sync-j1"
plot "perf/results/2026-12-04-issue17-quiet/vhost-queues.dat" index 3 using 1:2 with linespoints lw 2 title "null", \
     "" index 3 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 3 using 1:4 with linespoints lw 2 dt 3 title "pagecache"

unset multiplot
