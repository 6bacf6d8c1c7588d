// The serve protocol's concurrency.Election commands: campaign, proclaim, resign, leader, observe.
package main

import (
	"context"
	"errors"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// runElection runs an Election command of run (ctx: the server's, for short operations).
func (a *actor) runElection(ctx context.Context, c command) {
	switch c.Op {
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
	}
}
