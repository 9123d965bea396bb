// Command keeperprof runs the keeper exactly as "keeper serve" does
// (keeper.Run) and writes profiles of it when it stops, to find where a load
// test's time goes. It is a measuring tool, not a way to run a keeper.
//
// Usage:
//
//	keeperprof -data-dir DIR [-database-url URL] [-listen ADDR] -cpuprofile cpu.out [-mutexprofile mutex.out] [-blockprofile block.out]
//
// SIGINT or SIGTERM stops the keeper; the profiles cover its whole life.
// Read them with "go tool pprof -top keeperprof cpu.out".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keeper"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "keeperprof:", err)
		os.Exit(1)
	}
}

func run() error {
	var c config.Config
	var cpuOut, mutexOut, blockOut string
	flag.StringVar(&c.DataDir, "data-dir", "", "data directory")
	flag.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL; empty: SQLite in the data dir")
	flag.StringVar(&c.Listen, "listen", "", "address of the Operator API")
	flag.StringVar(&c.Log.Level, "log-level", "warn", "debug, info, warn or error")
	flag.StringVar(&cpuOut, "cpuprofile", "", "write a CPU profile here")
	flag.StringVar(&mutexOut, "mutexprofile", "", "write a mutex contention profile here")
	flag.StringVar(&blockOut, "blockprofile", "", "write a blocking profile here")
	flag.Parse()
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	if cpuOut != "" {
		f, err := os.Create(cpuOut)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if mutexOut != "" {
		runtime.SetMutexProfileFraction(5)
		defer writeProfile("mutex", mutexOut)
	}
	if blockOut != "" {
		runtime.SetBlockProfileRate(10000) // one sample per 10 µs blocked
		defer writeProfile("block", blockOut)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return keeper.Run(ctx, c, keeper.NewLogger(os.Stderr, c), nil)
}

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeperprof:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "keeperprof:", err)
	}
}
