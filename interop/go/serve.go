// serve: the JSON-lines protocol of main.go's doc comment. Commands in, events out; each actor
// (one session) runs its commands in order on a goroutine of its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

type server struct {
	cli    *clientv3.Client
	ttl    int
	out    *out
	ctx    context.Context // cancelled on shutdown
	actors map[string]*actor
	wg     sync.WaitGroup // actor loops and observers
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
