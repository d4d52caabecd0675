package sqlkit

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

func TestClaimRoundsGiveUpAfterABound(t *testing.T) {
	rounds := 0
	lost := claimRound{LostToAnotherClaimer: true}
	found, err := claimRounds(func() (claimRound, error) { rounds++; return lost, nil })
	if found || !errors.Is(err, runstate.ErrUnavailable) || rounds != MaxClaimRounds {
		t.Fatalf("always lost: found %v, %v after %d rounds; want UNAVAILABLE after %d", found, err, rounds, MaxClaimRounds)
	}
	rounds = 0
	found, err = claimRounds(func() (claimRound, error) {
		rounds++
		return claimRound{Claimed: rounds == 3, LostToAnotherClaimer: rounds < 3}, nil
	})
	if !found || err != nil || rounds != 3 {
		t.Fatalf("found in round 3: %v %v after %d", found, err, rounds)
	}
	found, err = claimRounds(func() (claimRound, error) { return claimRound{}, nil })
	if found || err != nil {
		t.Fatalf("nothing runnable: %v %v", found, err)
	}
}

func TestMergeRunnableOrdersOnceEachAndCuts(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(id string, prio int, sec int) runstate.RunSnapshot {
		return runstate.RunSnapshot{RunID: id, Priority: prio, CreatedAt: at.Add(time.Duration(sec) * time.Second)}
	}
	got := mergeRunnable([]runstate.RunSnapshot{run("b", 1, 2), run("a", 1, 1), run("c", 5, 9), run("a", 1, 1)}, 2)
	if len(got) != 2 || got[0].RunID != "c" || got[1].RunID != "a" {
		t.Fatalf("merged %v, want c then a", got)
	}
}

func TestClauseBindsItsValuesInItsOrder(t *testing.T) {
	var b strings.Builder
	c := Clause{SQL: " AND (a < ? OR (a = ? AND b > ?))", Bind: []int{0, 0, 1}}
	args := c.write(&b, []any{"before"}, 7, "x")
	if b.String() != c.SQL || !slices.Equal(args, []any{"before", 7, 7, "x"}) {
		t.Fatalf("wrote %q with %v", b.String(), args)
	}
	if got := Values(3); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("Values(3) = %v", got)
	}
}

func TestRowsPerStatementKeepsWithinTheLimits(t *testing.T) {
	k := &Driver{dialect: Dialect{MaxParams: 10, MaxBulkBytes: 8}}
	small := [][]any{{"a", 1, 2}, {"b", 1, 2}, {"c", 1, 2}, {"d", 1, 2}}
	if n := k.rowsPerStatement(small); n != 3 {
		t.Errorf("rows of 3 values within 10: %d a statement, want 3", n)
	}
	large := [][]any{{"0123456789", 1}, {"x", 1}}
	if n := k.rowsPerStatement(large); n != 1 {
		t.Errorf("a row over the byte bound: %d a statement, want it alone", n)
	}
	if n := k.rowsPerStatement([][]any{{"abcd", 1}, {"efgh", 1}, {"i", 1}}); n != 2 {
		t.Errorf("rows of 4 bytes within 8: %d a statement, want 2", n)
	}
}
