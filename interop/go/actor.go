// actor: one session of the serve protocol, its blocking operations (cancelled by "cancel" or
// shutdown), and the helpers its commands share.
package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

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
	case "lock", "trylock", "incr", "unlock", "count":
		a.runMutex(ctx, c)
	case "campaign", "proclaim", "resign", "leader", "observe":
		a.runElection(ctx, c)
	case "barrier-hold", "barrier-release", "barrier-wait", "dbarrier-enter", "dbarrier-leave", "rlock", "wlock", "rwunlock":
		a.runRecipe(c)
	case "session":
		if existed { // else ensureSession just printed it
			a.emit("session", "lease", fmt.Sprintf("%x", int64(a.session.Lease())))
		}
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
