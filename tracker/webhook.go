package tracker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/runstate/runstate/internal/redact"
)

// DeadLetter is a notification that could not be delivered.
type DeadLetter struct {
	URL       string    `json:"url"` // without its password or secret query parameters
	Event     Event     `json:"event"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	At        time.Time `json:"at"`
}

// DeadLetters keeps undeliverable notifications where an operator can list them.
type DeadLetters interface {
	Add(DeadLetter) error
	List() ([]DeadLetter, error)
}

// FileDeadLetters appends dead letters to a JSON-lines file.
type FileDeadLetters struct {
	Path string
	mu   sync.Mutex
}

// Add appends d to the file.
func (f *FileDeadLetters) Add(d DeadLetter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	file, err := os.OpenFile(f.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := file.Write(append(b, '\n')); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// List reads every dead letter, oldest first.
func (f *FileDeadLetters) List() ([]DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := os.Open(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var out []DeadLetter
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var d DeadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return out, fmt.Errorf("%s: %w", f.Path, err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// WebhookOptions configure a Webhook.
type WebhookOptions struct {
	// Attempts per event before it is dead-lettered (default 5).
	Attempts int
	// Backoff before the second attempt, doubled (with jitter) for each
	// further one, at most MaxBackoff (defaults 200ms and 5s).
	Backoff, MaxBackoff time.Duration
	// Timeout of one attempt (default 5s).
	Timeout time.Duration
	// Queue is how many events may wait for delivery (default 1024); when
	// it is full, new events are dead-lettered rather than waited for.
	Queue       int
	DeadLetters DeadLetters
	Logger      *slog.Logger
	Client      *http.Client
	// OnAttempt, when set, is told the outcome of every delivery attempt
	// (Delivered, Retrying, DeadLettered), for metrics.
	OnAttempt func(DeliveryOutcome)
}

// DeliveryOutcome is what became of one delivery attempt.
type DeliveryOutcome string

// Outcomes of delivery attempts.
const (
	Delivered    DeliveryOutcome = "delivered"
	Retrying     DeliveryOutcome = "retrying"      // it failed and is tried again
	DeadLettered DeliveryOutcome = "dead_lettered" // it failed, or could not be queued, for the last time
)

func (w *Webhook) observe(o DeliveryOutcome) {
	if w.opts.OnAttempt != nil {
		w.opts.OnAttempt(o)
	}
}

// Webhook posts each event as JSON to a URL, in order, from its own
// goroutine: Notify never blocks and a slow or dead receiver never holds up
// or changes a run. Failed deliveries are retried with exponential backoff,
// then dead-lettered.
type Webhook struct {
	url   string
	shown string // url without its secrets, for logs and dead letters
	opts  WebhookOptions
	queue chan Event
	stop  chan struct{} // closed by Close: take no more events
	hurry chan struct{} // closed when Close's deadline passes: retry no more
	done  chan struct{}
	once  sync.Once
	rush  sync.Once
}

var _ Notifier = (*Webhook)(nil)

// CheckWebhookURL checks that raw is an http or https URL with a host; its
// error never repeats the URL, which may hold a password.
func CheckWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("the URL does not parse; want http(s)://host[:port]/path")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL, such as https://hooks.example.com/runstate")
	case u.Host == "":
		return errors.New("the URL names no host; want http(s)://host[:port]/path")
	}
	return nil
}

// NewWebhook starts delivering to url (see CheckWebhookURL). Logs and dead
// letters show it without its password or secret query parameters.
func NewWebhook(target string, opts WebhookOptions) *Webhook {
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	w := &Webhook{url: target, shown: redact.URL(target), opts: opts, queue: make(chan Event, opts.Queue), stop: make(chan struct{}),
		hurry: make(chan struct{}), done: make(chan struct{})}
	go w.deliverAll()
	return w
}

// Notify queues ev for delivery, or dead-letters it at once when the queue
// is full or the webhook is closed.
func (w *Webhook) Notify(ev Event) {
	select {
	case <-w.stop:
		w.deadLetter(ev, 0, errors.New("the webhook was closed"))
		return
	default:
	}
	select {
	case w.queue <- ev:
	default:
		w.deadLetter(ev, 0, errors.New("the delivery queue is full"))
	}
}

// Close stops taking events and delivers the queued ones until ctx ends;
// those still undelivered then are dead-lettered.
func (w *Webhook) Close(ctx context.Context) {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
	case <-ctx.Done():
		w.rush.Do(func() { close(w.hurry) })
		<-w.done
	}
}

func (w *Webhook) hurried() bool {
	select {
	case <-w.hurry:
		return true
	default:
		return false
	}
}

func (w *Webhook) deliverAll() {
	defer close(w.done)
	for {
		var ev Event
		select {
		case ev = <-w.queue:
		case <-w.stop:
			// Drain what is queued, then end.
			for {
				select {
				case ev := <-w.queue:
					w.deliver(ev)
				default:
					return
				}
			}
		}
		w.deliver(ev)
	}
}

func (w *Webhook) deliver(ev Event) {
	body, err := json.Marshal(ev)
	if err != nil {
		w.deadLetter(ev, 0, err)
		return
	}
	backoff := w.opts.Backoff
	last := errors.New("the webhook closed before delivery")
	attempt := 0
	for attempt < w.opts.Attempts && !w.hurried() {
		attempt++
		if last = w.post(body); last == nil {
			w.observe(Delivered)
			return
		}
		if attempt == w.opts.Attempts {
			break
		}
		w.observe(Retrying)
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		w.opts.Logger.Debug("webhook delivery failed; retrying", "url", w.shown, "run_id", ev.RunID, "attempt", attempt, "in", sleep, "error", last)
		select {
		case <-time.After(sleep):
		case <-w.hurry:
		}
		backoff = min(backoff*2, w.opts.MaxBackoff)
	}
	w.deadLetter(ev, attempt, last)
}

func (w *Webhook) post(body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("the webhook URL does not parse")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.opts.Client.Do(req)
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		urlErr.URL = w.shown // the client strips a password, not a token in the query
	}
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

func (w *Webhook) deadLetter(ev Event, attempts int, cause error) {
	w.observe(DeadLettered)
	d := DeadLetter{URL: w.shown, Event: ev, Attempts: attempts, At: time.Now().UTC()}
	if cause != nil {
		d.LastError = cause.Error()
	}
	w.opts.Logger.Warn("webhook delivery dead-lettered", "url", w.shown, "run_id", ev.RunID, "status", ev.Status, "attempts", attempts, "error", d.LastError)
	if w.opts.DeadLetters == nil {
		return
	}
	if err := w.opts.DeadLetters.Add(d); err != nil {
		w.opts.Logger.Error("could not keep a dead letter", "error", err)
	}
}
