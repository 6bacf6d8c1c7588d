// The serve protocol's experimental/recipes commands: Barrier, DoubleBarrier and RWMutex.
package main

import (
	"errors"

	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

// runRecipe runs a recipe command of run (their calls take no context: see uncancellable).
func (a *actor) runRecipe(c command) {
	switch c.Op {
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
	}
}
