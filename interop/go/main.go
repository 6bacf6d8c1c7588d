// Command go-interop drives etcd's own Go package go.etcd.io/etcd/client/v3/concurrency (Session,
// Mutex, Election) and its experimental/recipes (Barrier, DoubleBarrier, RWMutex), so that this
// project's tests can run Go and TypeScript contenders side by side on one etcd, and so that
// `npm run bench` can measure the real Go package.
//
//	go-interop [--endpoints=127.0.0.1:2379,...] [--ttl=60] [--namespace=P] [serve]
//	go-interop [--endpoints=...] [--ttl=60] bench-contended [--name=N] [--duration=5s] [--contenders=8]
//	go-interop [--endpoints=...] [--ttl=60] bench-election [--name=N] [--rounds=20] [--queued=long-before|5ms-before]
//	go-interop [--endpoints=...] [--ttl=60] bench-uncontended [--name=N] [--duration=2s] [--block=25] [--put=true]
//	go-interop [--endpoints=...] [--ttl=60] bench-locks [--prefix=P] [--names=1000] [--sessions=50] [--duration=5s]
//	go-interop [--endpoints=...] [--ttl=60] bench-sessions [--sessions=1000] [--idle=1s]
//
// serve (the default) reads one JSON command per line on stdin and writes one JSON event per line
// on stdout. Every command names an actor ("id"); each actor has its own concurrency.Session (one
// lease, granted on the actor's first command with --ttl) and runs its commands one after another.
// All actors share one client, as goroutines of one Go service would.
//
//	{"id":"g1","op":"session"}                         -> {"id":"g1","event":"session","lease":"<hex>"}
//	{"id":"g1","op":"lock","name":"N"}                 -> {"event":"acquired","key":"N/<hex>","rev":<create rev>,"header":<rev>}
//	{"id":"g1","op":"trylock","name":"N"}              -> "acquired" as above, or {"event":"locked","error":"mutex: Locked by another session"}
//	{"id":"g1","op":"incr","counter":"K"}              -> {"event":"incremented","value":v+1,"ok":true}; needs the lock:
//	                                                      Get(K), then Txn If(IsOwner()) Then Put(K, v+1)
//	{"id":"g1","op":"unlock"}                          -> {"event":"unlocked"}
//	{"id":"g1","op":"count","name":"N","counter":"K","n":10}
//	                                                   -> n times lock, incr, unlock: {"event":"counted","value":v,"rev":r} each, then {"event":"done","n":n}
//	{"id":"g1","op":"campaign","name":"N","value":"V"} -> {"event":"leading","key":"N/<hex>","rev":<create rev>}
//	{"id":"g1","op":"proclaim","value":"V"}            -> {"event":"proclaimed"}
//	{"id":"g1","op":"resign"}                          -> {"event":"resigned"}
//	{"id":"g1","op":"leader","name":"N"}               -> {"event":"leader","key":..,"value":..,"rev":..} or {"event":"no-leader"}
//	{"id":"o1","op":"observe","name":"N"}              -> {"event":"observed","key":..,"value":..,"rev":<create>,"mod":<mod rev>} per change,
//	                                                      {"event":"observe-ended"} when Observe's channel closes
//
// The recipes of go.etcd.io/etcd/client/v3/experimental/recipes (their calls take no context: a
// "cancel" or shutdown stops waiting for one, which is then abandoned and runs on until it returns or
// the process exits):
//
//	{"id":"g1","op":"barrier-hold","name":"N"}         -> {"event":"held","created":true}; created false when Hold found the key
//	                                                      already there (Go's ErrKeyExists). recipe.Barrier: key N, no lease
//	{"id":"g1","op":"barrier-release","name":"N"}      -> {"event":"released"} (Barrier.Release: deletes N)
//	{"id":"g1","op":"barrier-wait","name":"N"}         -> {"event":"waited"} once N is absent (Barrier.Wait)
//	{"id":"g1","op":"dbarrier-enter","name":"N","n":3} -> {"event":"entered","key":"N/waiters/<ns>","rev":<create rev>} once n members
//	                                                      entered (recipe.DoubleBarrier on the actor's session, count n), or
//	                                                      {"event":"too-many","error":"too many clients"} (ErrTooManyClients)
//	{"id":"g1","op":"dbarrier-leave"}                  -> {"event":"left"} once every member left (DoubleBarrier.Leave)
//	{"id":"g1","op":"rlock","name":"N"}                -> {"event":"rlocked","key":"N/read/<ns>","rev":<create rev>} (recipe.RWMutex.RLock)
//	{"id":"g1","op":"wlock","name":"N"}                -> {"event":"wlocked","key":"N/write/<ns>","rev":<create rev>} (RWMutex.Lock)
//	{"id":"g1","op":"rwunlock"}                        -> {"event":"rwunlocked","key":..,"rev":..} (RUnlock or Unlock, whichever the
//	                                                      actor holds: it deletes the key)
//
// The recipes do not expose their keys: "entered", "rlocked" and "wlocked" report the one key under
// the name's prefix on the actor's lease, read once the call returned. An actor has at most one
// double barrier and one RWMutex at a time.
//
//	{"id":"g1","op":"cancel"}                          -> cancels the actor's blocking lock, campaign, observe or recipe call ("cancelled")
//	{"id":"g1","op":"close"}                           -> closes (revokes) the actor's session: {"event":"closed"}
//
// Failures are {"id":..,"event":"error","op":..,"error":".."}. When stdin ends (or on SIGTERM or
// SIGINT) every operation is cancelled, every session is closed (its lease revoked, so nothing is
// left in etcd), {"event":"bye"} is written and the program exits 0. Startup ends with
// {"event":"ready","client":"<module version>"}.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	ttl := flag.Int("ttl", 60, "session TTL in seconds (Go's default is 60)")
	dialTimeout := flag.Duration("dial-timeout", 5*time.Second, "client dial timeout")
	ns := flag.String("namespace", "", "a key prefix for every key, through go.etcd.io/etcd/client/v3/namespace")
	flag.Parse()
	mode := "serve"
	args := flag.Args()
	if len(args) > 0 {
		mode, args = args[0], args[1:]
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: *dialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		os.Exit(1)
	}
	defer cli.Close()
	if *ns != "" {
		// As namespace's doc says: KV, Watcher and Lease wrapped, so concurrency's sessions, mutexes
		// and elections all live under the prefix.
		cli.KV = namespace.NewKV(cli.KV, *ns)
		cli.Watcher = namespace.NewWatcher(cli.Watcher, *ns)
		cli.Lease = namespace.NewLease(cli.Lease, *ns)
	}
	switch mode {
	case "serve":
		if len(args) > 0 {
			usage("serve takes no arguments")
		}
		serve(cli, *ttl, *endpoints)
	case "bench-contended":
		os.Exit(benchContended(cli, strings.Split(*endpoints, ","), *ttl, args))
	case "bench-election":
		os.Exit(benchElection(cli, strings.Split(*endpoints, ","), *ttl, args))
	case "bench-uncontended":
		os.Exit(benchUncontended(strings.Split(*endpoints, ","), *ttl, args))
	case "bench-locks":
		os.Exit(benchLocks(strings.Split(*endpoints, ","), *ttl, args))
	case "bench-sessions":
		os.Exit(benchSessions(strings.Split(*endpoints, ","), *ttl, args))
	default:
		usage("unknown mode " + strconv.Quote(mode))
	}
}

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "go-interop: %s\nusage: go-interop [--endpoints=A,B] [--ttl=S] [serve | bench-contended | bench-election | bench-uncontended | bench-locks | bench-sessions] [flags]\n", msg)
	os.Exit(2)
}

// clientVersion is the version of go.etcd.io/etcd/client/v3 this binary was built with.
func clientVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/client/v3" {
				return d.Version
			}
		}
	}
	return "unknown"
}
