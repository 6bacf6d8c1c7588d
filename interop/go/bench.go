// Benchmarks of the real Go package, shaped like bench/contended.ts and bench/election.ts so that
// `npm run bench` can put them side by side. Each prints one JSON object on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// summary matches bench/stats.ts Summary (milliseconds).
type summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func summarize(samples []float64) summary {
	if len(samples) == 0 {
		return summary{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	pick := func(q float64) float64 {
		i := int(q*float64(len(s))+0.999999999) - 1
		return s[min(len(s)-1, max(0, i))]
	}
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return summary{N: len(s), Mean: sum / float64(len(s)), P50: pick(0.5), P99: pick(0.99), Min: s[0], Max: s[len(s)-1]}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// benchClient is one contender's own client, as a separate process would have.
func benchClient(endpoints []string, i int) (*clientv3.Client, error) {
	// Spread contenders over the members as bench/context.ts endpointsFor does.
	eps := append(append([]string(nil), endpoints[i%len(endpoints):]...), endpoints[:i%len(endpoints)]...)
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// benchContended: C contenders, each with its own client and session, loop Lock -> (empty critical
// section) -> Unlock on one name for the duration. Like bench/contended.ts it checks mutual exclusion
// in process and reports waits (Lock called -> held).
func benchContended(admin *clientv3.Client, endpoints []string, ttl int, args []string) int {
	fs := flag.NewFlagSet("bench-contended", flag.ExitOnError)
	name := fs.String("name", fmt.Sprintf("bench/go/contended/%d", time.Now().UnixNano()), "lock name")
	duration := fs.Duration("duration", 2*time.Second, "how long to loop")
	contenders := fs.Int("contenders", 8, "contenders, each with its own client and session")
	_ = fs.Parse(args)
	C := *contenders
	type contender struct {
		cli *clientv3.Client
		s   *concurrency.Session
		m   *concurrency.Mutex
	}
	cs := make([]contender, C)
	for i := range cs {
		cli, err := benchClient(endpoints, i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-interop:", err)
			return 1
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-interop:", err)
			return 1
		}
		cs[i] = contender{cli, s, concurrency.NewMutex(s, *name)}
	}
	var (
		holder     atomic.Int64
		violations atomic.Int64
		mu         sync.Mutex
		waits      []float64
		lastToken  int64
		wg         sync.WaitGroup
		firstErr   error
	)
	holder.Store(-1)
	per := make([]int, C)
	start := time.Now()
	end := start.Add(*duration)
	var lastDone atomic.Int64
	for i := range cs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := cs[i]
			for time.Now().Before(end) {
				t := time.Now()
				if err := c.m.Lock(context.Background()); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				w := ms(time.Since(t))
				if !holder.CompareAndSwap(-1, int64(i)) {
					violations.Add(1)
				}
				token := myRev(c.m)
				mu.Lock()
				waits = append(waits, w)
				per[i]++
				if token <= lastToken {
					violations.Add(1)
				}
				lastToken = token
				mu.Unlock()
				if !holder.CompareAndSwap(int64(i), -1) {
					violations.Add(1)
				}
				if err := c.m.Unlock(context.Background()); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lastDone.Store(int64(time.Since(start)))
			}
		}(i)
	}
	wg.Wait()
	for _, c := range cs {
		_ = c.s.Close()
		_ = c.cli.Close()
	}
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", firstErr)
		return 1
	}
	left, err := admin.Get(context.Background(), *name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	total, lo, hi := 0, per[0], per[0]
	for _, n := range per {
		total += n
		lo, hi = min(lo, n), max(hi, n)
	}
	elapsed := ms(time.Duration(lastDone.Load()))
	spread := 0.0
	if total > 0 {
		spread = float64(hi-lo) / (float64(total) / float64(C))
	}
	printJSON(map[string]any{
		"impl":               "go",
		"client":             clientVersion(),
		"contenders":         C,
		"elapsedMs":          elapsed,
		"acquisitions":       total,
		"acquisitionsPerSec": float64(total) * 1000 / elapsed,
		"wait":               summarize(waits),
		"perContender":       per,
		"spread":             spread,
		"mutualExclusion":    violations.Load() == 0 && total > 0,
		"violations":         violations.Load(),
		"keysLeft":           left.Count,
	})
	return 0
}

// benchElection: two candidates (own client and session each) take turns: a leads, b campaigns and
// is queued either long before (250 ms, past etcd's 100 ms watch catch-up loop) or 5 ms before a
// resigns; the handover is a.Resign() called -> b.Campaign() returned. As bench/election.ts.
func benchElection(admin *clientv3.Client, endpoints []string, ttl int, args []string) int {
	fs := flag.NewFlagSet("bench-election", flag.ExitOnError)
	name := fs.String("name", fmt.Sprintf("bench/go/election/%d", time.Now().UnixNano()), "election name")
	rounds := fs.Int("rounds", 20, "rounds per queued mode")
	queuedFlag := fs.String("queued", "long-before,5ms-before", "comma-separated: long-before, 5ms-before")
	_ = fs.Parse(args)
	type cand struct {
		cli *clientv3.Client
		s   *concurrency.Session
	}
	cs := make([]cand, 2)
	for i := range cs {
		cli, err := benchClient(endpoints, i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-interop:", err)
			return 1
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err != nil {
			fmt.Fprintln(os.Stderr, "go-interop:", err)
			return 1
		}
		cs[i] = cand{cli, s}
	}
	defer func() {
		for _, c := range cs {
			_ = c.s.Close()
			_ = c.cli.Close()
		}
	}()
	var results []map[string]any
	for _, queued := range splitComma(*queuedFlag) {
		var wait time.Duration
		switch queued {
		case "long-before":
			wait = 250 * time.Millisecond
		case "5ms-before":
			wait = 5 * time.Millisecond
		default:
			fmt.Fprintf(os.Stderr, "go-interop: unknown --queued %q\n", queued)
			return 2
		}
		var handovers []float64
		violations := 0
		for r := 0; r < *rounds; r++ {
			a, b := cs[r%2], cs[(r+1)%2]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ea := concurrency.NewElection(a.s, *name)
			if err := ea.Campaign(ctx, "leader"); err != nil {
				cancel()
				fmt.Fprintln(os.Stderr, "go-interop: leader campaign:", err)
				return 1
			}
			eb := concurrency.NewElection(b.s, *name)
			var resignedAt atomic.Int64 // ns since epoch; 0 = not yet
			type res struct {
				at    time.Time
				early bool
				err   error
			}
			done := make(chan res, 1)
			go func() {
				err := eb.Campaign(ctx, "follower")
				now := time.Now()
				done <- res{now, resignedAt.Load() == 0, err}
			}()
			time.Sleep(wait)
			t := time.Now()
			resignedAt.Store(t.UnixNano())
			if err := ea.Resign(ctx); err != nil {
				cancel()
				fmt.Fprintln(os.Stderr, "go-interop: resign:", err)
				return 1
			}
			rr := <-done
			if rr.err != nil {
				cancel()
				fmt.Fprintln(os.Stderr, "go-interop: follower campaign:", rr.err)
				return 1
			}
			handovers = append(handovers, ms(rr.at.Sub(t)))
			if rr.early {
				violations++
			}
			err := eb.Resign(ctx)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "go-interop: resign:", err)
				return 1
			}
		}
		results = append(results, map[string]any{"impl": "go", "queued": queued, "handover": summarize(handovers), "violations": violations})
	}
	left, err := admin.Get(context.Background(), *name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		return 1
	}
	for _, r := range results {
		r["keysLeft"] = left.Count
	}
	printJSON(map[string]any{"client": clientVersion(), "results": results})
	return 0
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
