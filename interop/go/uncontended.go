// bench-uncontended: the real Go package's uncontended Mutex.Lock + Unlock on one session, shaped
// like bench/uncontended.ts, so that `npm run bench` can put ours ÷ Go side by side on one etcd.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// cycleResult matches bench/uncontended.ts CycleResult (milliseconds, microseconds of CPU).
type cycleResult struct {
	Cycles       int     `json:"cycles"`
	CyclesPerSec float64 `json:"cyclesPerSec"`
	Latency      summary `json:"latency"`
	RPCsPerCycle float64 `json:"rpcsPerCycle"`
	// This process's CPU time (user + system, every goroutine) per cycle, over the timed blocks.
	CPUUsPerCycle float64 `json:"cpuUsPerCycle"`
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchUncontended: one client (unary RPCs counted by an interceptor), one session, one Mutex;
// blocks of --block Lock + Unlock cycles alternate with blocks of sequential Puts (the yardstick)
// for --duration, as bench/uncontended.ts interleaves its implementations. Each cycle and each Put
// is timed; so is the process's CPU per block.
func benchUncontended(endpoints []string, ttl int, args []string) int {
	fs := flag.NewFlagSet("bench-uncontended", flag.ExitOnError)
	name := fs.String("name", fmt.Sprintf("bench/go/uncontended/%d", time.Now().UnixNano()), "lock name (the Put yardstick writes <name>-put and deletes it)")
	duration := fs.Duration("duration", 2*time.Second, "how long to loop (after the warm-up)")
	block := fs.Int("block", 25, "operations per block; lock cycles and Puts alternate block by block")
	put := fs.Bool("put", true, "interleave the sequential Put yardstick")
	warmup := fs.Int("warmup", 20, "untimed lock cycles (and Puts) first")
	_ = fs.Parse(args)

	var rpcs atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rpcs.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	m := concurrency.NewMutex(s, *name)
	putKey := *name + "-put"
	ctx := context.Background()
	cycle := func() error {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	putOnce := func() error {
		_, err := cli.Put(ctx, putKey, "v")
		return err
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		_ = s.Close()
		return 1
	}
	for i := 0; i < *warmup; i++ {
		if err := cycle(); err != nil {
			return fail(err)
		}
		if *put {
			if err := putOnce(); err != nil {
				return fail(err)
			}
		}
	}
	type acc struct {
		samples []float64
		spent   time.Duration
		cpu     time.Duration
		rpcs    int64
	}
	var lock, puts acc
	run := func(a *acc, op func() error) error {
		r0, c0, t0 := rpcs.Load(), cpuTime(), time.Now()
		for i := 0; i < *block; i++ {
			t := time.Now()
			if err := op(); err != nil {
				return err
			}
			a.samples = append(a.samples, ms(time.Since(t)))
		}
		a.spent += time.Since(t0)
		a.cpu += cpuTime() - c0
		a.rpcs += rpcs.Load() - r0
		return nil
	}
	end := time.Now().Add(*duration)
	for time.Now().Before(end) {
		if err := run(&lock, cycle); err != nil {
			return fail(err)
		}
		if *put {
			if err := run(&puts, putOnce); err != nil {
				return fail(err)
			}
		}
	}
	result := func(a acc) cycleResult {
		n := len(a.samples)
		return cycleResult{
			Cycles:        n,
			CyclesPerSec:  float64(n) * 1000 / ms(a.spent),
			Latency:       summarize(a.samples),
			RPCsPerCycle:  float64(a.rpcs) / float64(n),
			CPUUsPerCycle: float64(a.cpu.Microseconds()) / float64(n),
		}
	}
	if *put {
		if _, err := cli.Delete(ctx, putKey); err != nil {
			return fail(err)
		}
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	left, err := cli.Get(ctx, *name, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	out := struct {
		Impl     string `json:"impl"`
		Client   string `json:"client"`
		KeysLeft int64  `json:"keysLeft"`
		cycleResult
		Put *cycleResult `json:"put,omitempty"`
	}{Impl: "go", Client: clientVersion(), KeysLeft: left.Count, cycleResult: result(lock)}
	if *put {
		p := result(puts)
		out.Put = &p
	}
	printJSON(out)
	return 0
}
