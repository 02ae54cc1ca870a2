# plot.gp - one clustered bar chart per workload from perf/run's
# plot-<workload>.dat (a header row of tool names, then one row per
# scenario "order/Nr/epoch" with a value per tool; 0 = not measured).
#
# usage: gnuplot -e "datafile='D'; outfile='O.png'; ylabel='files/s'; \
#                    title='T'" perf/plot.gp
set terminal pngcairo size 1100,520 noenhanced font ",10"
set output outfile
set title title
set ylabel ylabel
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key outside right top
set grid ytics
set yrange [0:*]
set xtics rotate by -20
ntools = 5
plot for [i=2:ntools+1] datafile using i:xtic(1) title columnheader(i)
