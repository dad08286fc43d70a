#!/bin/sh
# Plots bench_rules' CSV output (--benchmark_out=FILE --benchmark_out_format=csv): time relative
# to a read pass of the same bytes (x_read; 1 = memory bound) for every rule, per batch size,
# one panel per path, for the K and V of the first row. Needs gnuplot (Debian gnuplot-nox).
#   sh bench/plot_rules.sh rules.csv [rules.png]
set -e
csv=$1
png=${2:-${csv%.csv}.png}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# "verify/RULE/PATH/B../K../V../..." -> one data file per rule and path: B x_read
awk -F, -v dir="$dir" '/^"verify\// {
  gsub(/"/, "", $1); split($1, f, "/")
  b = substr(f[4], 2); shape = f[5] " " f[6]
  print b, $12 >> (dir "/" f[3] "." f[2])
  print shape > (dir "/shape")
}' "$csv"
shape=$(head -n 1 "$dir/shape")
plots() {
  sep=""
  for f in "$dir"/"$1".*; do
    rule=${f##*.}
    printf '%s"%s" using 1:2 with linespoints title "%s"' "$sep" "$f" "$rule"
    sep=", "
  done
}
gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output "$png"
set multiplot layout 1,2 title "verify time / read pass of the same bytes ($shape, 1 thread)"
set logscale x 2
set xlabel "batch size B"
set ylabel "x read pass"
set key outside right
set title "worst path (rejected at the first draft)"
plot $(plots worst)
set title "every draft accepted"
plot $(plots accepted)
unset multiplot
GP
echo "wrote $png"
