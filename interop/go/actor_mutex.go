// The serve protocol's concurrency.Mutex commands: lock, trylock, incr, unlock, count.
package main

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// runMutex runs a Mutex command of run (ctx: the server's, for short operations).
func (a *actor) runMutex(ctx context.Context, c command) {
	switch c.Op {
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
	}
}
