//go:build race

package schedule_test

// raceEnabled: under -race the pure-Go SQLite runs several times slower, so
// the multi-process test spaces its occurrences further apart.
const raceEnabled = true
