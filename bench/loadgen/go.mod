module querator.dev/bench/loadgen

go 1.22
