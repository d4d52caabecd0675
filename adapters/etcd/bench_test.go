package etcd_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd"
	"github.com/runstate/runstate/adapters/etcd/etcdtest"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
)

// The benchmarks run on one three-member cluster on loopback, started once
// for the benchmark binary (or RUNSTATE_ETCD_ENDPOINTS), and put the store
// beside a hand-written transaction doing the least the same operation
// needs. Each reports the requests every member handled per operation
// (range, txn) and the writes that went through consensus, read from the
// members' own /metrics: what an operation costs the cluster, apart from
// the machine's speed.
var (
	benchCluster struct {
		once      sync.Once
		endpoints []string
		cluster   *etcdcluster.Cluster
		dir       string
		err       error
	}
)

func benchEndpoints(b *testing.B) []string {
	b.Helper()
	benchCluster.once.Do(func() {
		dir, err := os.MkdirTemp("", "runstate-etcd-bench-*")
		if err != nil {
			benchCluster.err = err
			return
		}
		benchCluster.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		benchCluster.cluster, benchCluster.err = etcdcluster.Start(ctx, dir, etcdcluster.Size)
		if benchCluster.err == nil {
			benchCluster.endpoints = benchCluster.cluster.Endpoints()
		}
	})
	if benchCluster.err != nil {
		b.Fatal(benchCluster.err)
	}
	return benchCluster.endpoints
}

// clusterCounts are counters summed over the cluster's members.
type clusterCounts struct{ ranges, txns, proposals float64 }

// counts reads every member's /metrics.
func counts(b *testing.B) clusterCounts {
	b.Helper()
	var c clusterCounts
	var leaderProposals float64
	for _, ep := range benchCluster.endpoints {
		resp, err := http.Get("http://" + ep + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		isLeader := false
		var proposals float64
		for sc.Scan() {
			line := sc.Text()
			value := func() float64 {
				f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				return f
			}
			switch {
			case strings.HasPrefix(line, `grpc_server_handled_total{`) && strings.Contains(line, `grpc_method="Range"`):
				c.ranges += value()
			case strings.HasPrefix(line, `grpc_server_handled_total{`) && strings.Contains(line, `grpc_method="Txn"`):
				c.txns += value()
			case strings.HasPrefix(line, "etcd_server_proposals_committed_total "):
				proposals = value()
			case strings.HasPrefix(line, "etcd_server_is_leader "):
				isLeader = value() == 1
			}
		}
		resp.Body.Close()
		if isLeader {
			leaderProposals = proposals
		}
	}
	c.proposals = leaderProposals
	return c
}

// reportCost runs body and reports what it cost the cluster per operation.
func reportCost(b *testing.B, body func()) {
	before := counts(b)
	body()
	after := counts(b)
	n := float64(b.N)
	b.ReportMetric((after.ranges-before.ranges)/n, "ranges/op")
	b.ReportMetric((after.txns-before.txns)/n, "txns/op")
	b.ReportMetric((after.proposals-before.proposals)/n, "proposals/op")
}

func benchClient(b *testing.B) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: benchEndpoints(b), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func openBenchStore(b *testing.B) *etcd.Store {
	s, err := etcd.Open(context.Background(), etcd.Options{Endpoints: benchEndpoints(b), Prefix: etcdtest.NewPrefix()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// handRun is the hand-written baseline's record: the snapshot and the
// last audit seq in one key, as the store keeps them.
type handRun struct {
	Run     runstate.RunSnapshot `json:"run"`
	LastSeq int64                `json:"last_seq"`
}

// handUpdate is one transition by hand: a linearizable read of the run,
// the version check, then one transaction that writes the run and an audit
// key if the run's mod revision is still the one read, moving the run's
// status index key.
func handUpdate(ctx context.Context, cli *clientv3.Client, prefix, id string, expected int64, to runstate.RunStatus) (int64, error) {
	key := prefix + "r/" + id
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, runstate.ErrNotFound
	}
	var rec handRun
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return 0, err
	}
	if rec.Run.Version != expected {
		return 0, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: id, ExpectedVersion: expected, CurrentVersion: rec.Run.Version}
	}
	from := rec.Run.Status
	rec.Run.Status, rec.Run.Version, rec.Run.UpdatedAt = to, rec.Run.Version+1, time.Now().UTC()
	rec.LastSeq++
	ev, _ := json.Marshal(runstate.AuditEvent{RunID: id, Seq: rec.LastSeq, Kind: runstate.AuditTransition, From: from, To: to,
		Time: rec.Run.UpdatedAt, Version: rec.Run.Version})
	val, _ := json.Marshal(rec)
	seq := binary.BigEndian.AppendUint64(nil, uint64(rec.LastSeq))
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(
		clientv3.OpPut(key, string(val)),
		clientv3.OpPut(prefix+"a/"+id+"/"+string(seq), string(ev)),
		clientv3.OpDelete(prefix+"s/"+string(from)+"/"+id),
		clientv3.OpPut(prefix+"s/"+string(to)+"/"+id, ""),
	).Commit()
	if err != nil {
		return 0, err
	}
	if !txn.Succeeded {
		return 0, errors.New("the run changed while it was written")
	}
	return rec.Run.Version, nil
}

// BenchmarkCASUpdate compares the store's UpdateRun (a transition: CAS,
// audit event, index moves) with the hand-written transaction, from 1 and
// 8 goroutines each on a run of its own.
func BenchmarkCASUpdate(b *testing.B) {
	ctx := context.Background()
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("store/goroutines=%d", par), func(b *testing.B) {
			s := openBenchStore(b)
			runs := make([]runstate.RunSnapshot, par)
			for i := range runs {
				r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				runs[i] = r
			}
			reportCost(b, func() {
				benchutil.Concurrently(b, par, func(w int, next func() bool) {
					run := runs[w]
					for i := 0; next(); i++ {
						var err error
						if run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(benchutil.FlipStatus(i))}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
		b.Run(fmt.Sprintf("handwritten/goroutines=%d", par), func(b *testing.B) {
			cli := benchClient(b)
			prefix := etcdtest.NewPrefix()
			ids := make([]string, par)
			for i := range ids {
				ids[i] = fmt.Sprintf("run-%d", i)
				v, _ := json.Marshal(handRun{Run: runstate.RunSnapshot{RunID: ids[i], WorkflowName: "bench", Status: runstate.StatusQueued, Version: 1}, LastSeq: 1})
				if _, err := cli.Put(ctx, prefix+"r/"+ids[i], string(v)); err != nil {
					b.Fatal(err)
				}
			}
			reportCost(b, func() {
				benchutil.Concurrently(b, par, func(w int, next func() bool) {
					version := int64(1)
					for i := 0; next(); i++ {
						var err error
						if version, err = handUpdate(ctx, cli, prefix, ids[w], version, benchutil.FlipStatus(i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}

// handClaim takes the head of a hand-written queue: one range read of its
// first key, then one transaction that deletes the queue key and writes
// the lease if the key is still there; a claimer that loses the race reads
// the head again.
func handClaim(ctx context.Context, cli *clientv3.Client, prefix, owner string) (string, error) {
	queue := prefix + "q/"
	for {
		resp, err := cli.Get(ctx, queue, clientv3.WithRange(clientv3.GetPrefixRangeEnd(queue)), clientv3.WithLimit(1))
		if err != nil {
			return "", err
		}
		if len(resp.Kvs) == 0 {
			return "", runstate.ErrNotFound
		}
		head := resp.Kvs[0]
		id := string(head.Key[len(queue)+8:])
		lease, _ := json.Marshal(map[string]any{"owner": owner, "expires_at": time.Now().Add(time.Hour)})
		txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(head.Key)), "=", head.ModRevision)).Then(
			clientv3.OpDelete(string(head.Key)),
			clientv3.OpPut(prefix+"l/"+id, string(lease)),
			clientv3.OpPut(prefix+"o/"+owner+"/"+id, ""),
		).Commit()
		if err != nil {
			return "", err
		}
		if txn.Succeeded {
			return id, nil
		}
	}
}

// BenchmarkClaimNext compares the store's claim-next with the hand-written
// claim, from 1 and 8 workers, on a queue of runs created beforehand.
func BenchmarkClaimNext(b *testing.B) {
	ctx := context.Background()
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("store/workers=%d", workers), func(b *testing.B) {
			s := openBenchStore(b)
			benchutil.FillQueue(b, s, b.N+workers)
			reportCost(b, func() {
				benchutil.Claims(b, workers, func(w int) (string, error) {
					cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}, TTL: time.Hour})
					return cl.Run.RunID, err
				})
			})
		})
		b.Run(fmt.Sprintf("handwritten/workers=%d", workers), func(b *testing.B) {
			cli := benchClient(b)
			prefix := etcdtest.NewPrefix()
			benchutil.Fill(b, b.N+workers, func(i int64) error {
				key := prefix + "q/" + string(binary.BigEndian.AppendUint64(nil, uint64(i))) + fmt.Sprintf("run-%d", i)
				_, err := cli.Put(ctx, key, "")
				return err
			})
			reportCost(b, func() {
				benchutil.Claims(b, workers, func(w int) (string, error) {
					return handClaim(ctx, cli, prefix, fmt.Sprintf("w%d", w))
				})
			})
		})
	}
}

// TestMain stops the benchmarks' cluster and removes its data.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchCluster.cluster != nil {
		benchCluster.cluster.Close()
	}
	if benchCluster.dir != "" {
		os.RemoveAll(benchCluster.dir)
	}
	os.Exit(code)
}
