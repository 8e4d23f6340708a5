//go:build race

package readme

// raceEnabled makes the README's build use -race too when the tests run
// with it, so the binary shares the compiled packages already in the cache
// instead of compiling every dependency a second time.
const raceEnabled = true
