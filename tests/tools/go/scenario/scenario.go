// Package scenario is what the Go client programs share: how pytest calls them
// (`PROGRAM BOOTSTRAP COMMAND JSON`, tests/kafka_clients.py) and how they answer
// (one JSON document on stdout), and the bookkeeping of a group's consumption.
package scenario

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Args is a command's JSON argument; each command reads the fields it needs.
type Args struct {
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	From       int    `json:"from"`        // produce: the first record's number (key k<n>, value v<n>)
	Count      int    `json:"count"`       // produce: how many; consume: how many distinct records to wait for
	Members    int    `json:"members"`     // consume: members of the group in this process
	SecondFrom int    `json:"second_from"` // consume: the second member joins once this many records were seen
	Partitions int    `json:"partitions"`  // admin: the topic's partitions when made
	TimeoutS   int    `json:"timeout_s"`
}

// Main reads the command line, runs the named command and prints its answer.
func Main(commands map[string]func(bootstrap string, a Args) any) {
	if len(os.Args) != 4 {
		fail(fmt.Errorf("usage: %s BOOTSTRAP COMMAND JSON", os.Args[0]))
	}
	run, ok := commands[os.Args[2]]
	if !ok {
		fail(fmt.Errorf("no command %q", os.Args[2]))
	}
	var a Args
	if err := json.Unmarshal([]byte(os.Args[3]), &a); err != nil {
		fail(err)
	}
	if a.TimeoutS == 0 {
		a.TimeoutS = 60
	}
	if a.Members == 0 {
		a.Members = 1
	}
	out, err := json.Marshal(run(os.Args[1], a))
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

// Err is an error as the test compares it: its text, or nil.
func Err(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

// Key and Value are a produced record's n-th key and value.
func Key(n int) string   { return fmt.Sprintf("k%d", n) }
func Value(n int) string { return fmt.Sprintf("v%d", n) }

// Seen is what the members of one group consumed: [member, partition, offset, key, value]
// in the order each member got them, and when to stop (Count distinct records, or the deadline).
type Seen struct {
	mu       sync.Mutex
	records  [][]any
	distinct map[[2]int64]bool
	count    int
	second   int
	Done     chan struct{}
	Second   chan struct{} // closed once the second member may join
	joined   chan struct{} // closed once the second member consumed a record
	Deadline time.Time
}

func NewSeen(a Args) *Seen {
	s := &Seen{distinct: map[[2]int64]bool{}, count: a.Count, second: a.SecondFrom,
		Done: make(chan struct{}), Second: make(chan struct{}), joined: make(chan struct{}),
		Deadline: time.Now().Add(time.Duration(a.TimeoutS) * time.Second)}
	if s.second <= 0 { // members start together: no pause
		close(s.Second)
		close(s.joined)
		s.second = -1
	}
	if s.count <= 0 {
		close(s.Done)
	}
	return s
}

// Add records that `member` consumed a record.
func (s *Seen) Add(member int, partition int32, offset int64, key, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, []any{member, partition, offset, string(key), string(value)})
	s.distinct[[2]int64{int64(partition), offset}] = true
	n := len(s.distinct)
	if s.second > 0 && n >= s.second {
		s.second = 0
		close(s.Second)
	}
	if member == 1 && s.second == 0 {
		s.second = -1
		close(s.joined)
	}
	if s.count > 0 && n >= s.count {
		s.count = 0
		close(s.Done)
	}
}

// Pause holds the first member, once the second may join, until the second consumed a
// record (or `stop` is closed: a session that ends in a rebalance), so that the group
// rebalances in the middle of the topic whatever the speed of the machine.
func (s *Seen) Pause(member int, stop <-chan struct{}) {
	if member != 0 {
		return
	}
	select {
	case <-s.Second:
	default:
		return
	}
	select {
	case <-s.joined:
	case <-stop:
	case <-s.Done:
	case <-time.After(time.Until(s.Deadline)):
	}
}

// Wait until Count distinct records were seen or the deadline passed; whether they were.
func (s *Seen) Wait() bool {
	select {
	case <-s.Done:
		return true
	case <-time.After(time.Until(s.Deadline)):
		return false
	}
}

// Result is the consume command's answer.
func (s *Seen) Result(complete bool, errs []string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = [][]any{}
	}
	if errs == nil {
		errs = []string{}
	}
	return map[string]any{"records": s.records, "complete": complete, "errors": errs}
}
