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
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
)

type command struct {
	ID      string `json:"id"`
	Op      string `json:"op"`
	Name    string `json:"name,omitempty"`
	Value   string `json:"value,omitempty"`
	Counter string `json:"counter,omitempty"`
	N       int    `json:"n,omitempty"`
}

// out writes one JSON object per line; safe for concurrent use.
type out struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *out) emit(id, event string, kv ...any) {
	m := map[string]any{"event": event}
	if id != "" {
		m["id"] = id
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

type actor struct {
	id    string
	srv   *server
	queue chan command
	done  chan struct{}

	session  *concurrency.Session
	mutex    *concurrency.Mutex
	election *concurrency.Election
	dbarrier *recipe.DoubleBarrier
	rwmutex  *recipe.RWMutex
	rwKey    string // the RWMutex key we hold, and its create revision
	rwRev    int64
	rwRead   bool

	mu      sync.Mutex
	cancels map[*context.CancelFunc]struct{} // blocking operations in progress
	closed  bool
}

type server struct {
	cli    *clientv3.Client
	ttl    int
	out    *out
	ctx    context.Context // cancelled on shutdown
	actors map[string]*actor
	wg     sync.WaitGroup // actor loops and observers
}

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

func serve(cli *clientv3.Client, ttl int, endpoints string) {
	ctx, stop := context.WithCancel(context.Background())
	s := &server{cli: cli, ttl: ttl, out: &out{w: os.Stdout}, ctx: ctx, actors: map[string]*actor{}}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	s.out.emit("", "ready", "client", clientVersion(), "endpoints", endpoints, "ttl", ttl)
loop:
	for {
		select {
		case <-sigs:
			break loop
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			if len(strings.TrimSpace(string(line))) == 0 {
				continue
			}
			var c command
			if err := json.Unmarshal(line, &c); err != nil || c.ID == "" || c.Op == "" {
				s.out.emit(c.ID, "error", "op", c.Op, "error", fmt.Sprintf("bad command %q: want {\"id\":..,\"op\":..}", line))
				continue
			}
			s.dispatch(c)
		}
	}
	// Shutdown: cancel what blocks, let every actor finish its queue, then revoke every lease.
	stop()
	for _, a := range s.actors {
		close(a.queue)
		a.cancelAll()
	}
	// Go's Mutex cleans up a cancelled Lock with client.Ctx(), which never ends if etcd is gone:
	// give up waiting after a while rather than outlive the test that started us.
	if !waitTimeout(&s.wg, 5*time.Second) {
		fmt.Fprintln(os.Stderr, "go-interop: operations still running 5 s after shutdown; exiting anyway")
		os.Exit(3)
	}
	// Revoke every lease at once: if etcd is gone, this costs one timeout, not one per actor.
	var closing sync.WaitGroup
	for _, a := range s.actors {
		closing.Add(1)
		go func() {
			defer closing.Done()
			a.closeSession()
		}()
	}
	closing.Wait()
	s.out.emit("", "bye")
}

// waitTimeout waits for wg, or returns false after d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (s *server) dispatch(c command) {
	a := s.actors[c.ID]
	if a == nil {
		a = &actor{id: c.ID, srv: s, queue: make(chan command, 1024), done: make(chan struct{}), cancels: map[*context.CancelFunc]struct{}{}}
		s.actors[c.ID] = a
		s.wg.Add(1)
		go a.loop()
	}
	if c.Op == "cancel" { // not queued: it interrupts the command in progress
		a.cancelAll()
		return
	}
	a.queue <- c
}

func (a *actor) loop() {
	defer a.srv.wg.Done()
	for c := range a.queue {
		a.run(c)
	}
}

// opContext is cancelled by a "cancel" command or by shutdown.
func (a *actor) opContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(a.srv.ctx)
	a.mu.Lock()
	a.cancels[&cancel] = struct{}{}
	a.mu.Unlock()
	return ctx, func() {
		a.mu.Lock()
		delete(a.cancels, &cancel)
		a.mu.Unlock()
		cancel()
	}
}

func (a *actor) cancelAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.cancels {
		(*c)()
	}
}

func (a *actor) emit(event string, kv ...any) { a.srv.out.emit(a.id, event, kv...) }

func (a *actor) fail(op string, err error) {
	if errors.Is(err, context.Canceled) {
		a.emit("cancelled", "op", op)
		return
	}
	a.emit("error", "op", op, "error", err.Error())
}

func (a *actor) ensureSession() error {
	if a.session != nil {
		return nil
	}
	if a.closed {
		return errors.New("session closed")
	}
	s, err := concurrency.NewSession(a.srv.cli, concurrency.WithTTL(a.srv.ttl))
	if err != nil {
		return err
	}
	a.session = s
	a.emit("session", "lease", fmt.Sprintf("%x", int64(s.Lease())))
	return nil
}

func (a *actor) closeSession() {
	if a.session == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Session.Close revokes with the session's own context; make sure it cannot hang forever.
	done := make(chan error, 1)
	go func() { done <- a.session.Close() }()
	select {
	case err := <-done:
		if err != nil {
			a.emit("error", "op", "close", "error", err.Error())
		}
	case <-ctx.Done():
		a.emit("error", "op", "close", "error", "revoke timed out")
	}
	a.session = nil
	a.closed = true
}

// myRev is the CreateRevision of the mutex's key, as held in its IsOwner compare.
func myRev(m *concurrency.Mutex) int64 {
	cmp := m.IsOwner()
	if t, ok := cmp.TargetUnion.(*pb.Compare_CreateRevision); ok {
		return t.CreateRevision
	}
	panic("IsOwner is not a CreateRevision compare")
}

func (a *actor) run(c command) {
	existed := a.session != nil
	if c.Op != "close" {
		if err := a.ensureSession(); err != nil {
			a.fail(c.Op, err)
			return
		}
	}
	// Short operations run under the server's context: cancelled on shutdown, so none can hang it.
	ctx := a.srv.ctx
	switch c.Op {
	case "session":
		if existed { // else ensureSession just printed it
			a.emit("session", "lease", fmt.Sprintf("%x", int64(a.session.Lease())))
		}
	case "lock", "trylock":
		ctx, done := a.opContext()
		defer done()
		m := concurrency.NewMutex(a.session, c.Name)
		var err error
		if c.Op == "lock" {
			err = m.Lock(ctx)
		} else {
			err = m.TryLock(ctx)
		}
		if errors.Is(err, concurrency.ErrLocked) {
			a.emit("locked", "error", err.Error())
			return
		}
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.mutex = m
		a.emit("acquired", "key", m.Key(), "rev", myRev(m), "header", m.Header().Revision)
	case "incr":
		if a.mutex == nil {
			a.fail(c.Op, errors.New("incr needs the lock"))
			return
		}
		v, ok, err := a.increment(c.Counter)
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("incremented", "value", v, "ok", ok)
	case "unlock":
		if a.mutex == nil {
			a.fail(c.Op, errors.New("not locked"))
			return
		}
		err := a.mutex.Unlock(ctx)
		a.mutex = nil
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("unlocked")
	case "count":
		ctx, done := a.opContext()
		defer done()
		m := concurrency.NewMutex(a.session, c.Name)
		for i := 0; i < c.N; i++ {
			if err := m.Lock(ctx); err != nil {
				a.fail(c.Op, err)
				return
			}
			a.mutex = m
			v, ok, err := a.increment(c.Counter)
			a.mutex = nil
			rev := myRev(m)
			if uerr := m.Unlock(ctx); err == nil {
				err = uerr
			}
			if err == nil && !ok {
				err = fmt.Errorf("owner compare failed at rev %d: we did not hold the lock", rev)
			}
			if err != nil {
				a.fail(c.Op, err)
				return
			}
			a.emit("counted", "value", v, "rev", rev)
		}
		a.emit("done", "n", c.N)
	case "campaign":
		ctx, done := a.opContext()
		defer done()
		e := concurrency.NewElection(a.session, c.Name)
		if err := e.Campaign(ctx, c.Value); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.election = e
		a.emit("leading", "key", e.Key(), "rev", e.Rev())
	case "proclaim":
		if a.election == nil {
			a.fail(c.Op, concurrency.ErrElectionNotLeader)
			return
		}
		if err := a.election.Proclaim(ctx, c.Value); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("proclaimed", "value", c.Value)
	case "resign":
		if a.election == nil {
			a.fail(c.Op, concurrency.ErrElectionNotLeader)
			return
		}
		err := a.election.Resign(ctx)
		a.election = nil
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("resigned")
	case "leader":
		e := concurrency.NewElection(a.session, c.Name)
		r, err := e.Leader(ctx)
		if errors.Is(err, concurrency.ErrElectionNoLeader) {
			a.emit("no-leader")
			return
		}
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		kv := r.Kvs[0]
		a.emit("leader", "key", string(kv.Key), "value", string(kv.Value), "rev", kv.CreateRevision)
	case "observe":
		// Runs beside the actor's other commands, until "cancel" or shutdown.
		ctx, done := a.opContext()
		e := concurrency.NewElection(a.session, c.Name)
		ch := e.Observe(ctx)
		a.srv.wg.Add(1)
		a.emit("observing", "name", c.Name)
		go func() {
			defer a.srv.wg.Done()
			defer done()
			for r := range ch {
				if len(r.Kvs) == 0 {
					continue
				}
				kv := r.Kvs[0]
				a.emit("observed", "key", string(kv.Key), "value", string(kv.Value), "rev", kv.CreateRevision, "mod", kv.ModRevision)
			}
			if ctx.Err() != nil {
				a.emit("cancelled", "op", "observe")
			} else {
				a.emit("observe-ended")
			}
		}()
	case "barrier-hold":
		err := recipe.NewBarrier(a.srv.cli, c.Name).Hold()
		if err != nil && !errors.Is(err, recipe.ErrKeyExists) {
			a.fail(c.Op, err)
			return
		}
		a.emit("held", "created", err == nil)
	case "barrier-release":
		if err := recipe.NewBarrier(a.srv.cli, c.Name).Release(); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("released")
	case "barrier-wait":
		if err := a.uncancellable(recipe.NewBarrier(a.srv.cli, c.Name).Wait); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("waited")
	case "dbarrier-enter":
		if a.dbarrier != nil {
			a.fail(c.Op, errors.New("already in a double barrier: dbarrier-leave first"))
			return
		}
		b := recipe.NewDoubleBarrier(a.session, c.Name, c.N)
		err := a.uncancellable(b.Enter)
		if errors.Is(err, recipe.ErrTooManyClients) {
			a.emit("too-many", "error", err.Error())
			return
		}
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.dbarrier = b
		key, rev, err := a.ownKey(c.Name + "/waiters/")
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("entered", "key", key, "rev", rev)
	case "dbarrier-leave":
		if a.dbarrier == nil {
			a.fail(c.Op, errors.New("not in a double barrier: dbarrier-enter first"))
			return
		}
		b := a.dbarrier
		a.dbarrier = nil
		if err := a.uncancellable(b.Leave); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("left")
	case "rlock", "wlock":
		if a.rwmutex != nil {
			a.fail(c.Op, errors.New("already holds an RWMutex: rwunlock first"))
			return
		}
		m := recipe.NewRWMutex(a.session, c.Name)
		lock, sub, event := m.Lock, "/write/", "wlocked"
		if c.Op == "rlock" {
			lock, sub, event = m.RLock, "/read/", "rlocked"
		}
		if err := a.uncancellable(lock); err != nil {
			a.fail(c.Op, err)
			return
		}
		key, rev, err := a.ownKey(c.Name + sub)
		if err != nil {
			a.fail(c.Op, err)
			return
		}
		a.rwmutex, a.rwKey, a.rwRev, a.rwRead = m, key, rev, c.Op == "rlock"
		a.emit(event, "key", key, "rev", rev)
	case "rwunlock":
		if a.rwmutex == nil {
			a.fail(c.Op, errors.New("holds no RWMutex"))
			return
		}
		m := a.rwmutex
		a.rwmutex = nil
		unlock := m.Unlock
		if a.rwRead {
			unlock = m.RUnlock
		}
		if err := unlock(); err != nil {
			a.fail(c.Op, err)
			return
		}
		a.emit("rwunlocked", "key", a.rwKey, "rev", a.rwRev)
	case "close":
		a.closeSession()
		a.emit("closed")
	default:
		a.fail(c.Op, fmt.Errorf("unknown op %q", c.Op))
	}
}

// uncancellable runs f, a recipe call that takes no context, in its own goroutine, so that "cancel"
// and shutdown can stop waiting for it (it is abandoned, and runs on until it returns).
func (a *actor) uncancellable(f func() error) error {
	ctx, done := a.opContext()
	defer done()
	res := make(chan error, 1)
	go func() { res <- f() }()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ownKey finds the key a recipe created for this actor: the one key under prefix on its lease.
func (a *actor) ownKey(prefix string) (string, int64, error) {
	r, err := a.srv.cli.Get(a.srv.ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return "", 0, err
	}
	var found []*mvccpb.KeyValue
	for _, kv := range r.Kvs {
		if clientv3.LeaseID(kv.Lease) == a.session.Lease() {
			found = append(found, kv)
		}
	}
	if len(found) != 1 {
		return "", 0, fmt.Errorf("found %d keys under %s on lease %x, want 1", len(found), prefix, int64(a.session.Lease()))
	}
	return string(found[0].Key), found[0].CreateRevision, nil
}

// increment is the fenced write: read the counter, then write counter+1 only while our lock key
// still has the CreateRevision we acquired it with (Mutex.IsOwner). The read is not part of the
// compare on purpose: if two holders ever overlapped, the counter would end short.
func (a *actor) increment(counter string) (int64, bool, error) {
	cli := a.srv.cli
	ctx := a.srv.ctx
	r, err := cli.Get(ctx, counter)
	if err != nil {
		return 0, false, err
	}
	var v int64
	if len(r.Kvs) > 0 {
		if v, err = strconv.ParseInt(string(r.Kvs[0].Value), 10, 64); err != nil {
			return 0, false, fmt.Errorf("counter %s: %w", counter, err)
		}
	}
	t, err := cli.Txn(ctx).If(a.mutex.IsOwner()).Then(clientv3.OpPut(counter, strconv.FormatInt(v+1, 10))).Commit()
	if err != nil {
		return 0, false, err
	}
	return v + 1, t.Succeeded, nil
}
