package tracker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate/tracker"
)

var quiet = slog.New(slog.DiscardHandler)

func events(n int) []tracker.Event {
	out := make([]tracker.Event, n)
	for i := range out {
		out[i] = tracker.Event{RunID: "r1", WorkflowName: "wf", Status: "running", Version: int64(i + 1), Timestamp: time.Now()}
	}
	return out
}

func TestWebhookDeliversInOrderAfterRetries(t *testing.T) {
	var mu sync.Mutex
	var got []int64
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%3 == 1 { // every third call fails
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		var ev tracker.Event
		json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		got = append(got, ev.Version)
		mu.Unlock()
	}))
	defer srv.Close()
	dead := &tracker.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
	h := tracker.NewWebhook(srv.URL, tracker.WebhookOptions{Backoff: time.Millisecond, DeadLetters: dead, Logger: quiet})
	for _, ev := range events(10) {
		h.Notify(ev)
	}
	h.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("delivered out of order or lost: %v", got)
		}
	}
	if len(got) != 10 {
		t.Fatalf("delivered %v", got)
	}
	if list, _ := dead.List(); len(list) != 0 {
		t.Fatalf("dead letters although every event got through: %+v", list)
	}
}

func TestWebhookDeadLettersAfterItsAttempts(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	dead := &tracker.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
	h := tracker.NewWebhook(srv.URL, tracker.WebhookOptions{Attempts: 4, Backoff: time.Millisecond, DeadLetters: dead, Logger: quiet})
	for _, ev := range events(2) {
		h.Notify(ev)
	}
	h.Close(context.Background())
	list, err := dead.List()
	if err != nil || len(list) != 2 || calls.Load() != 8 {
		t.Fatalf("%d dead letters (%v) after %d calls, want 2 after 8", len(list), err, calls.Load())
	}
	if list[0].Attempts != 4 || list[0].LastError == "" || list[0].Event.Version != 1 || list[0].URL != srv.URL {
		t.Fatalf("dead letter: %+v", list[0])
	}
}

func TestWebhookNeverBlocksTheCaller(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	dead := &tracker.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
	h := tracker.NewWebhook(srv.URL, tracker.WebhookOptions{Queue: 3, Attempts: 1, DeadLetters: dead, Logger: quiet})
	for _, ev := range events(20) { // the receiver holds the first; three wait; the rest cannot
		h.Notify(ev)
	}
	list, _ := dead.List()
	if len(list) < 16 {
		t.Fatalf("%d dead letters while the receiver hangs, want at least 16: Notify must not wait", len(list))
	}
	for _, d := range list {
		if d.LastError != "the delivery queue is full" || d.Attempts != 0 {
			t.Fatalf("dead letter %+v", d)
		}
	}
	// A deadline on Close dead-letters what is still queued instead of waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(200 * time.Millisecond); close(release) }()
	h.Close(ctx)
	// Of the events accepted, the one in flight is delivered once the
	// receiver answers; the ones still queued are dead-lettered, not waited for.
	after, _ := dead.List()
	if accepted := 20 - len(list); len(after) != len(list)+accepted-1 {
		t.Fatalf("%d dead letters after a hurried close, want %d (all but the one in flight)", len(after), len(list)+accepted-1)
	}
}
