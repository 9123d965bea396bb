// Package cputime reads the CPU time the current process has used, user and
// system together. Benchmarks and the load generator report it beside wall
// time: on a machine shared with other work, CPU time per request moves much
// less than latency does.
package cputime

import "time"

// Process returns the user and system CPU time this process has used, and
// false where the platform does not say.
func Process() (time.Duration, bool) { return process() }
