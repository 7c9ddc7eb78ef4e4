
set terminal pngcairo size 1280,520 font ",9"
set output "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.png"
set datafile missing "-"
set key bottom right font ",7"
set xlabel "request rings"
set ylabel "k requests/s"
set xtics (1, 2, 4)
set offsets 0.2, 0.2, 0, 0
set yrange [0:*]
set grid
set multiplot layout 2,4 title "vhost-user-fs export: requests/s by ring count (median)"
set title "read-aio-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 0 using 1:2 with linespoints lw 2 title "null", \
     "" index 0 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 0 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "write-aio-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 1 using 1:2 with linespoints lw 2 title "null", \
     "" index 1 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 1 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randread-aio-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 2 using 1:2 with linespoints lw 2 title "null", \
     "" index 2 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 2 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randwrite-aio-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 3 using 1:2 with linespoints lw 2 title "null", \
     "" index 3 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 3 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "read-sync-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 4 using 1:2 with linespoints lw 2 title "null", \
     "" index 4 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 4 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "write-sync-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 5 using 1:2 with linespoints lw 2 title "null", \
     "" index 5 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 5 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randread-sync-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 6 using 1:2 with linespoints lw 2 title "null", \
     "" index 6 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 6 using 1:4 with linespoints lw 2 dt 3 title "pagecache"
set title "randwrite-sync-j1"
plot "perf/results/2026-12-04-vhost-virtiofsd/vhost-queues.dat" index 7 using 1:2 with linespoints lw 2 title "null", \
     "" index 7 using 1:3 with linespoints lw 2 dt 2 title "file", \
     "" index 7 using 1:4 with linespoints lw 2 dt 3 title "pagecache"

unset multiplot
