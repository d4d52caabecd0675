package conformance_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runstate/runstate/adapters/badger/badgertest"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// scanningClaims is the catalogue's correct mapDriver, whose claim-next
// reads every run the store holds to find the first claimable one, as a
// key-value store without a claim index would: every rule passes, but its
// cost grows with the runs no claim may take. The wrapper counts the runs
// each claim reads.
type scanningClaims struct {
	*mapDriver
	reads *atomic.Int64
}

func (d scanningClaims) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	d.mu.Lock()
	d.reads.Add(int64(len(d.runs)))
	d.mu.Unlock()
	return d.mapDriver.ClaimNext(ctx, q, take)
}

// scaleTestOptions keep the stores small enough for seconds: 20 and 2,000
// runs, a growth of 100 and a bound of 10.
var scaleTestOptions = conformance.ScaleOptions{Small: 20, Large: 2000, Samples: 21}

func TestScaleFlagsClaimNextThatReadsEveryRun(t *testing.T) {
	var reads atomic.Int64
	target := driverTarget(func(d *mapDriver) driver.Driver { return scanningClaims{d, &reads} })
	opts := scaleTestOptions
	opts.Reads = reads.Load
	ms, err := conformance.MeasureScale(context.Background(), target, opts)
	if err != nil {
		t.Fatal(err)
	}
	claim := measurement(t, ms, conformance.ScaleClaimNext)
	t.Log(claim)
	// Runs read, not time, decide here, whatever the load on the machine:
	// each claim reads the whole store, 2,000 runs and more in the large
	// one, at most the 20 held and the claimable ones in the small.
	if !claim.Flagged || claim.ReadsRatio <= claim.Bound || claim.LargeReads < float64(opts.Large) || claim.SmallReads > float64(opts.Small+opts.Samples) {
		t.Errorf("claim-next reading every run: want flagged on runs read growing with the store, got %v", claim)
	}
	v := conformance.Verdicts([]conformance.Profile{{ID: conformance.ProfileScale}}, nil, ms)[0]
	if v.Status != conformance.Failed || len(v.Scale) != 3 {
		t.Errorf("scale verdict of a linear claim-next: want failed with the figures, got %+v", v)
	}
	t.Log(v.Verdict)
}

// TestScaleMeasuresTheReferenceStores: every operation is measured on
// the Badger and memory stores, with figures on both sizes. Whether a
// store's growth is under the bound is the certification run's verdict on
// the machine it runs on (conformance-runner certify), never a timing
// threshold in a test; the figures are logged.
func TestScaleMeasuresTheReferenceStores(t *testing.T) {
	for name, target := range map[string]conformance.Target{
		"badger": badgertest.Target(t.TempDir(), true),
		"memory": memorytest.Target(true),
	} {
		ms, err := conformance.MeasureScale(context.Background(), target, scaleTestOptions)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 3 {
			t.Errorf("%s: want claim-next, the runnable listing and a deep page measured, got %v", name, ms)
		}
		for _, m := range ms {
			t.Logf("%s: %v", name, m)
			if m.Skipped != "" || m.SmallSeconds <= 0 || m.LargeSeconds <= 0 {
				t.Errorf("%s: want every operation measured, got %v", name, m)
			}
		}
	}
}

// brokenListingTarget is the memory target with its listing broken.
func brokenListingTarget() conformance.Target {
	target := memorytest.Target(true)
	newHarness := target.NewHarness
	target.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
		h, err := newHarness(ctx)
		return memorytest.WithoutNextPages(h), err
	}
	return target
}

// A store that fails while measured is failed, not unmeasured: its
// listing cannot reach the deep page, and the verdict says so.
func TestScaleFailsAStoreWhoseListingIsBroken(t *testing.T) {
	opts := scaleTestOptions
	opts.Large = 200
	ms, err := conformance.MeasureScale(context.Background(), brokenListingTarget(), opts)
	var failure *conformance.ScaleFailure
	if !errors.As(err, &failure) || failure.Operation != conformance.ScaleListRunsDeep {
		t.Fatalf("MeasureScale on a broken listing: %v, want a *ScaleFailure of %s", err, conformance.ScaleListRunsDeep)
	}
	if len(ms) != 1 || ms[0].Operation != conformance.ScaleListRunsDeep || !strings.Contains(ms[0].Failed, "no next page") {
		t.Fatalf("measurements: %+v, want the deep page's, failed for the missing next page", ms)
	}
	v := conformance.Verdicts([]conformance.Profile{{ID: conformance.ProfileScale}}, nil, ms)[0]
	if v.Status != conformance.Failed || !strings.Contains(v.Verdict, "the store failed while measured: list-runs-deep") {
		t.Errorf("scale verdict of a broken listing: %q (%s), want failed naming the operation", v.Verdict, v.Status)
	}
	t.Log(v.Verdict)
}

// A harness that cannot open a store leaves scale unmeasured: no
// *ScaleFailure, since the store did nothing wrong.
func TestScaleHarnessErrorIsNoFailure(t *testing.T) {
	target := memorytest.Target(true)
	target.NewHarness = func(context.Context) (conformance.Harness, error) { return nil, errors.New("database unreachable") }
	ms, err := conformance.MeasureScale(context.Background(), target, scaleTestOptions)
	if err == nil || errors.As(err, new(*conformance.ScaleFailure)) || ms != nil {
		t.Errorf("MeasureScale without a store: %v, %v; want a plain error and no measurement", ms, err)
	}
}

func measurement(t *testing.T, ms []conformance.ScaleMeasurement, op string) conformance.ScaleMeasurement {
	t.Helper()
	for _, m := range ms {
		if m.Operation == op {
			return m
		}
	}
	t.Fatalf("no %s measurement in %v", op, ms)
	return conformance.ScaleMeasurement{}
}
