package runstate

import "reflect"

// Features are what a store can do beyond RunStateStore, each an optional
// interface of this package: a nil field is a feature the store lacks,
// and the package functions that need it fall back where their doc
// comments say (CreateRuns without a BatchCreator creates one run at a
// time, and so on).
//
// A store tells its features through its Features method, which every
// RunStateStore has, and a caller asks it when a call needs one, not
// once: a store across a process boundary may lose or gain one when its
// far side restarts. That is why features are not found by type
// assertion on the store. A type assertion sees only the method set of
// the value in hand, so a wrapper (a struct that embeds the store to add
// a method, a tracing layer, a validating one) hides every optional
// interface it does not spell out again, without a word: Go's
// optional-interface trap (http.ResponseWriter and Flusher). Features is
// a method of the interface itself, so embedding keeps it; a wrapper that
// changes calls starts from the features of the store it wraps and
// replaces the ones it changes, so that a feature it does not know yet
// passes through as it is. A feature is added here, in one place.
type Features struct {
	// Leases is the store's lease side, which lets several workers share
	// it (a Store is a RunStateStore with one). Nil: a store for one
	// process.
	Leases LeaseStore
	// LeaseReader tells who holds a run's lease; with Leases only.
	LeaseReader LeaseReader
	// BatchCreator creates many runs in one atomic write.
	BatchCreator BatchCreator
	// BatchUpdater applies many updates in one call.
	BatchUpdater BatchUpdater
	// BatchClaimer claims many runs in one call; with Leases only.
	BatchClaimer BatchClaimer
	// RunnableWatcher wakes idle workers when a run may have become
	// runnable; with Leases only.
	RunnableWatcher RunnableWatcher
	// RunWatcher wakes whoever follows one run when it changes.
	RunWatcher RunWatcher
}

// FeaturesOf returns the optional interfaces store implements itself, as
// a store that spells them out as methods reports them from its Features
// method:
//
//	func (s *MyStore) Features() runstate.Features { return runstate.FeaturesOf(s) }
//
// The features that need leases are left out of a store without them.
func FeaturesOf(store any) Features {
	var f Features
	v := reflect.ValueOf(&f).Elem()
	for i := range v.NumField() {
		if field := v.Field(i); reflect.TypeOf(store).Implements(field.Type()) {
			field.Set(reflect.ValueOf(store))
		}
	}
	return f.consistent()
}

// consistent drops the features that need leases from a store without them.
func (f Features) consistent() Features {
	if f.Leases == nil {
		f.LeaseReader, f.BatchClaimer, f.RunnableWatcher = nil, nil, nil
	}
	return f
}

// Names lists the features f has, by their field names (BatchCreator,
// Leases, …), for messages and reports.
func (f Features) Names() []string {
	var names []string
	v := reflect.ValueOf(f)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			names = append(names, v.Type().Field(i).Name)
		}
	}
	return names
}

// Resolve returns the features s has (Features decides which), each as a
// caller reaches it: s itself where s has the feature's methods, so that
// a wrapper that embeds a store and overrides one of them is called, and
// otherwise the one Features returns. A wrapper's own Features starts
// from Resolve of the store it wraps and replaces the features it
// changes.
func Resolve(s RunStateStore) Features {
	f := s.Features().consistent()
	v := reflect.ValueOf(&f).Elem()
	self := reflect.TypeOf(s)
	for i := range v.NumField() {
		if field := v.Field(i); !field.IsNil() && self.Implements(field.Type()) {
			field.Set(reflect.ValueOf(s))
		}
	}
	return f
}

// As returns s's feature T, one of the optional interfaces of Features
// (BatchCreator, LeaseReader, …), as Resolve finds it, or Store for s
// with its lease side; false when s lacks it. Use it where a type
// assertion s.(T) would be: it cannot lose a feature to a wrapper, nor
// find one a store lacks. T must be such an interface: As panics on any
// other type.
func As[T any](s RunStateStore) (T, bool) {
	var zero T
	want := reflect.TypeFor[T]()
	f := Resolve(s)
	feature, ok := featureField(reflect.ValueOf(f), want)
	if !ok {
		panic("runstate.As: " + want.String() + " is not a feature of runstate.Features")
	}
	if feature.IsNil() {
		return zero, false
	}
	if own, ok := any(s).(T); ok {
		return own, true
	}
	if want == storeType {
		return any(withLeases{s, f.Leases}).(T), true
	}
	return feature.Interface().(T), true
}

var storeType = reflect.TypeFor[Store]()

// featureField returns the field of Features whose type is t (Leases for
// Store).
func featureField(f reflect.Value, t reflect.Type) (reflect.Value, bool) {
	if t == storeType {
		t = reflect.TypeFor[LeaseStore]()
	}
	for i := range f.NumField() {
		if f.Type().Field(i).Type == t {
			return f.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// withLeases is a RunStateStore and its lease side as one Store; its
// Features are the RunStateStore's.
type withLeases struct {
	RunStateStore
	LeaseStore
}
