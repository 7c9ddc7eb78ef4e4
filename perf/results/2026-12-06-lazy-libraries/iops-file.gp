
set terminal pngcairo size 900,520 font ",10"
set output "/tmp/rr/mem/iops-file.png"
set title "file driver: IOPS per cell (median)"
set ylabel "kIOPS"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set datafile missing "-"
set key outside right top
set xtics rotate by -35
set grid ytics
set yrange [0:*]
plot for [i=2:2] "/tmp/rr/mem/iops-file.dat" using i:xtic(1) title columnheader(i)
