module github.com/reinhq/rein/bench/peers

go 1.26.8
