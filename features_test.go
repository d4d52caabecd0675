package runstate_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/grpctest"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/protocol"
)

// featureCalls says how to call each feature of runstate.Features, by its
// field name: the one place a new feature is added to this test. Each
// call goes to the store's feature as runstate.As finds it.
var featureCalls = map[string]func(ctx context.Context, s runstate.RunStateStore) error{
	"Leases": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.LeaseStore](s))(func(l runstate.LeaseStore) error {
			_, err := l.RenewLease(ctx, runstate.RenewLeaseParams{RunID: "r1", Token: 1, TTL: time.Minute})
			return err
		})
	},
	"LeaseReader": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.LeaseReader](s))(func(l runstate.LeaseReader) error {
			_, err := l.GetLease(ctx, "r1")
			return err
		})
	},
	"BatchCreator": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.BatchCreator](s))(func(b runstate.BatchCreator) error {
			_, err := b.CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{RunID: "r1", WorkflowName: "w"}}})
			return err
		})
	},
	"BatchUpdater": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.BatchUpdater](s))(func(b runstate.BatchUpdater) error {
			_, err := b.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{{RunID: "r1", ExpectedVersion: 1, Status: "running"}}})
			return err
		})
	},
	"BatchClaimer": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.BatchClaimer](s))(func(b runstate.BatchClaimer) error {
			_, err := b.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute, Max: 1})
			return err
		})
	},
	"RunnableWatcher": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.RunnableWatcher](s))(func(w runstate.RunnableWatcher) error {
			_, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
			return err
		})
	},
	"RunWatcher": func(ctx context.Context, s runstate.RunStateStore) error {
		return call(runstate.As[runstate.RunWatcher](s))(func(w runstate.RunWatcher) error {
			_, err := w.WatchRun(ctx, runstate.WatchRunParams{RunID: "r1"})
			return err
		})
	},
}

var errLacks = errors.New("the store lacks the feature")

// call calls f with the feature As found, or fails with errLacks.
func call[T any](feature T, ok bool) func(f func(T) error) error {
	return func(f func(T) error) error {
		if !ok {
			return errLacks
		}
		return f(feature)
	}
}

// everyFeature is a store with every feature's methods, whose Features
// names the ones of its mask; it records which of its methods were
// called, on whatever side of a connection it is.
type everyFeature struct {
	mask   int
	mu     *sync.Mutex
	called *[]string
}

func (s everyFeature) record(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.called = append(*s.called, name)
}

// Features implements runstate.RunStateStore: the fields of its mask.
func (s everyFeature) Features() runstate.Features {
	var f runstate.Features
	v := reflect.ValueOf(&f).Elem()
	for i := range v.NumField() {
		if s.mask&(1<<i) != 0 {
			v.Field(i).Set(reflect.ValueOf(s))
		}
	}
	return f
}

var someRun = runstate.RunSnapshot{RunID: "r1", WorkflowName: "w", Status: runstate.StatusQueued, Version: 1, Attempt: 1}

func (s everyFeature) CreateRun(context.Context, runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	s.record("CreateRun")
	return someRun, nil
}
func (s everyFeature) UpdateRun(context.Context, runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return someRun, nil
}
func (s everyFeature) GetRun(context.Context, string) (runstate.RunSnapshot, error) {
	return someRun, nil
}
func (s everyFeature) ListRuns(context.Context, runstate.ListRunsParams) (runstate.RunPage, error) {
	return runstate.RunPage{}, nil
}
func (s everyFeature) ListAuditEvents(context.Context, runstate.ListAuditParams) (runstate.AuditPage, error) {
	return runstate.AuditPage{}, nil
}
func (s everyFeature) ClaimRun(context.Context, runstate.ClaimRunParams) (runstate.Claim, error) {
	return runstate.Claim{}, runstate.ErrNotFound
}
func (s everyFeature) ClaimNextRun(context.Context, runstate.ClaimNextParams) (runstate.Claim, error) {
	return runstate.Claim{}, runstate.ErrNotFound
}
func (s everyFeature) RenewLease(context.Context, runstate.RenewLeaseParams) (runstate.Lease, error) {
	s.record("Leases")
	return runstate.Lease{RunID: "r1", Token: 1}, nil
}
func (s everyFeature) ReleaseLease(context.Context, runstate.ReleaseLeaseParams) error { return nil }
func (s everyFeature) ListRunnableRuns(context.Context, runstate.ListRunnableParams) (runstate.RunPage, error) {
	return runstate.RunPage{}, nil
}
func (s everyFeature) GetLease(context.Context, string) (runstate.Lease, error) {
	s.record("LeaseReader")
	return runstate.Lease{RunID: "r1", Token: 1}, nil
}
func (s everyFeature) CreateRuns(context.Context, runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	s.record("BatchCreator")
	return runstate.CreateRunsResult{Runs: []runstate.RunSnapshot{someRun}}, nil
}
func (s everyFeature) UpdateRuns(context.Context, runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	s.record("BatchUpdater")
	return runstate.UpdateRunsResult{Items: []runstate.UpdateRunsItem{{Run: someRun}}}, nil
}
func (s everyFeature) ClaimRuns(context.Context, runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	s.record("BatchClaimer")
	return runstate.ClaimRunsResult{}, nil
}
func (s everyFeature) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	s.record("RunnableWatcher")
	return watching(ctx), nil
}
func (s everyFeature) WatchRun(ctx context.Context, _ runstate.WatchRunParams) (<-chan struct{}, error) {
	s.record("RunWatcher")
	return watching(ctx), nil
}

// watching is a watch's channel: closed when ctx ends.
func watching(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}

// usersStore is what a user writes to give a store a method of their own:
// a struct that embeds it.
type usersStore struct {
	runstate.RunStateStore
	closed bool
}

func (u *usersStore) Close() error { u.closed = true; return nil }

// remote serves s over an in-process connection and returns the client's
// store, behind the kit's checks, as a plugin's or a gateway's client has it.
func remote(t *testing.T, s runstate.RunStateStore) runstate.RunStateStore {
	t.Helper()
	conn := grpctest.Dial(t, protocol.NewService(protocol.ServiceOptions{Name: "every-feature", Store: s}).Register)
	r, err := protocol.Connect(context.Background(), protocol.ConnectParams{Conn: conn, Peer: "the test's server"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.Checked()
}

// Every combination of features survives every layer a store can be
// wrapped in: the kit's checks, the wire of a plugin or a gateway,
// OpenTelemetry, and a user's struct that embeds the store to add a
// method, each over the one before. A feature the store has is reached,
// and reaches the store; a feature it lacks is absent at every layer.
func TestEveryCombinationOfFeaturesSurvivesEveryWrapper(t *testing.T) {
	fields := reflect.TypeFor[runstate.Features]()
	for i := range fields.NumField() {
		if featureCalls[fields.Field(i).Name] == nil {
			t.Fatalf("runstate.Features has %s, which featureCalls does not call: add it there", fields.Field(i).Name)
		}
	}
	for mask := range 1 << fields.NumField() {
		var mu sync.Mutex
		var called []string
		store := everyFeature{mask: mask, mu: &mu, called: &called}
		want := runstate.Resolve(store).Names() // the features that need leases only with them
		layers := []struct {
			name string
			s    runstate.RunStateStore
		}{{"the store", store}}
		add := func(name string, s runstate.RunStateStore) {
			layers = append(layers, struct {
				name string
				s    runstate.RunStateStore
			}{name + " over " + layers[len(layers)-1].name, s})
		}
		top := func() runstate.RunStateStore { return layers[len(layers)-1].s }
		add("checked", driver.Checked(top()))
		add("remote", remote(t, top()))
		add("OpenTelemetry", otelstore.Wrap(top(), otelstore.Options{}))
		add("a user's struct", &usersStore{RunStateStore: top()})
		for _, l := range layers {
			got := runstate.Resolve(l.s).Names()
			if !slices.Equal(got, want) {
				t.Errorf("features %v: %s has %v", want, l.name, got)
			}
			for name, f := range featureCalls {
				mu.Lock()
				called = nil
				mu.Unlock()
				ctx, cancel := context.WithCancel(context.Background())
				err := f(ctx, l.s)
				cancel()
				mu.Lock()
				reached := slices.Contains(called, name)
				mu.Unlock()
				switch has := slices.Contains(want, name); {
				case has && (err != nil || !reached):
					t.Errorf("features %v: %s through %s: %v, reached the store %v", want, name, l.name, err, reached)
				case !has && !errors.Is(err, errLacks):
					t.Errorf("features %v: %s through %s, which the store lacks: %v", want, name, l.name, err)
				}
			}
		}
	}
}

// A store built on the kit, embedded in a user's struct to add a method,
// keeps every feature: the integrator's case, which once lost
// BatchCreator. And the kit's store closes its driver.
func TestAStructEmbeddingTheKitsStoreKeepsEveryFeature(t *testing.T) {
	d := &closingDriver{}
	kit := driver.Wrap(d)
	type mine struct {
		driver.Store
		name string
	}
	s := mine{kit, "mine"}
	if got, want := s.Features().Names(), kit.Features().Names(); !slices.Equal(got, want) || len(got) < 4 {
		t.Errorf("embedded: %v, the kit's store: %v", got, want)
	}
	if err := s.Close(); err != nil || !d.closed {
		t.Errorf("Close: %v, the driver closed %v", err, d.closed)
	}
}

// closingDriver is a driver with Close; its storage is never reached.
type closingDriver struct {
	driver.Driver
	closed bool
}

func (d *closingDriver) Close() error { d.closed = true; return nil }

// As refuses a type that is no feature, loudly: a typo would otherwise
// read as a store without it.
func TestAsPanicsOnATypeThatIsNoFeature(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "is not a feature") {
			t.Errorf("As[error]: %v", r)
		}
	}()
	runstate.As[error](everyFeature{mask: -1, mu: &sync.Mutex{}, called: new([]string)})
}

// No code of the module finds an optional feature by type assertion: it
// would miss one a wrapper keeps as a feature, as runstate.As does not.
func TestNoFeatureIsFoundByTypeAssertion(t *testing.T) {
	assertion := regexp.MustCompile(`\.\((runstate\.)?(Store|LeaseStore|LeaseReader|BatchCreator|BatchUpdater|BatchClaimer|RunnableWatcher|RunWatcher)\)`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if assertion.MatchString(line) {
				t.Errorf("%s:%d finds a feature by type assertion; use runstate.As: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
