//go:build race

package tokenizer

// raceEnabled: the race detector slows encoding tenfold; long tests do less.
const raceEnabled = true
