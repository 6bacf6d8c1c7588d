// Checks the chaos run's linearizable operations with Porcupine, the checker of etcd's own robustness
// tests: the etcd counter that only an owner may increment (ownerCompare-guarded Txns) and the fenced
// register in the chaos parent.
//
//	porcupine <histories.json> <result.json>
//
// On a history that is not linearizable it writes Porcupine's HTML visualisation beside result.json
// and prints its path. Exit status: 0 when every history is linearizable, 1 when one is not (or the
// check timed out), 2 on bad input.
package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one operation as the chaos run exported it (chaos/porcupine.ts), times in microseconds.
type op struct {
	Client int    `json:"client"`
	Call   int64  `json:"call"`
	Ret    int64  `json:"ret"`
	Op     string `json:"op"`
	Value  int64  `json:"value"`
	Token  string `json:"token,omitempty"`
	Ok     bool   `json:"ok"`
}

type history struct {
	Name  string `json:"name"`
	Model string `json:"model"`
	Ops   []op   `json:"ops"`
}

type result struct {
	Name          string `json:"name"`
	Model         string `json:"model"`
	Operations    int    `json:"operations"`
	Result        string `json:"result"`
	Visualization string `json:"visualization,omitempty"`
}

// The etcd counter: a read returns the value; an increment to v (a guarded Txn that succeeded, or
// whose unknown outcome etcd's ledger shows applied) is possible only from v-1. Two owners that both
// passed ownerCompare having read the same value make the history non-linearizable.
var counterModel = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in := state.(int64), input.(op)
		switch in.Op {
		case "read":
			return in.Value == s, s
		case "inc":
			return in.Value == s+1, in.Value
		}
		return false, s
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(op)
		if in.Op == "read" {
			return fmt.Sprintf("read() -> %d", in.Value)
		}
		return fmt.Sprintf("inc() -> %d", in.Value)
	},
	DescribeState: func(state interface{}) string { return fmt.Sprint(state.(int64)) },
}

type fenced struct {
	value   int64
	highest string // decimal; "" before any request
}

func tokenAtLeast(t, highest string) bool {
	if highest == "" {
		return true
	}
	a, _ := new(big.Int).SetString(t, 10)
	b, _ := new(big.Int).SetString(highest, 10)
	return a.Cmp(b) >= 0
}

// The fenced register: a request is accepted iff its token is at least the highest seen (which it
// then becomes); a read returns the value whether accepted or not, an accepted write sets it.
var fencedModel = porcupine.Model{
	Init: func() interface{} { return fenced{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in := state.(fenced), input.(op)
		ok := tokenAtLeast(in.Token, s.highest)
		if ok != in.Ok {
			return false, s
		}
		if in.Op == "read" && in.Value != s.value {
			return false, s
		}
		if !ok {
			return true, s
		}
		next := fenced{value: s.value, highest: in.Token}
		if in.Op == "write" {
			next.value = in.Value
		}
		return true, next
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(op)
		verdict := "ok"
		if !in.Ok {
			verdict = "refused"
		}
		if in.Op == "read" {
			return fmt.Sprintf("read(token %s) -> %d %s", in.Token, in.Value, verdict)
		}
		return fmt.Sprintf("write(token %s, %d) %s", in.Token, in.Value, verdict)
	},
	DescribeState: func(state interface{}) string {
		s := state.(fenced)
		return fmt.Sprintf("%d (highest token %s)", s.value, s.highest)
	},
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: porcupine <histories.json> <result.json>")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var in struct {
		Histories []history `json:"histories"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	dir := filepath.Dir(os.Args[2])
	failed := false
	var out []result
	for _, h := range in.Histories {
		model := counterModel
		if h.Model == "fenced-register" {
			model = fencedModel
		} else if h.Model != "counter" {
			fmt.Fprintf(os.Stderr, "%s: unknown model %q\n", h.Name, h.Model)
			os.Exit(2)
		}
		ops := make([]porcupine.Operation, len(h.Ops))
		for i, o := range h.Ops {
			ops[i] = porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Call, Output: nil, Return: o.Ret}
		}
		res, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
		r := result{Name: h.Name, Model: h.Model, Operations: len(ops), Result: string(res)}
		if res != porcupine.Ok {
			failed = true
			path := filepath.Join(dir, unsafeName.ReplaceAllString(h.Name, "-")+".html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				r.Visualization = path
				fmt.Printf("porcupine: %s is %s: visualisation %s\n", h.Name, res, path)
			} else {
				fmt.Printf("porcupine: %s is %s (no visualisation: %v)\n", h.Name, res, err)
			}
		}
		out = append(out, r)
	}
	js, _ := json.MarshalIndent(map[string]interface{}{"results": out}, "", "  ")
	if err := os.WriteFile(os.Args[2], append(js, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
