package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The record store (backend.Records): every backend that keeps a ledger
// keeps one. These checks run with the ledger checks.
func recordChecks() []check {
	return []check{
		{"RecordsOneWinnerAmongConcurrentCreates", checkRecordOneWinner},
		{"RecordsRetriedCreateAnswersYours", checkRecordRetry},
		{"RecordsListNewestFirstAndExact", checkRecordList},
		{"RecordsDeleteOnlyByCreator", checkRecordDelete},
		{"RecordsPruneOnlyExpired", checkRecordPrune},
		{"RecordsBadInputChangesNothing", checkRecordBadInput},
		{"RecordsEndedContextIsNoAnswer", checkRecordEndedContext},
		{"RecordsApartFromRuns", checkRecordsApartFromRuns},
	}
}

// newRecords returns a fresh backend under test as its record store.
func (e *env) newRecords(t T) backend.Records {
	t.Helper()
	b := e.newLedger(t)
	r, ok := b.(backend.Records)
	if !ok {
		t.Fatalf("backend %q keeps a run ledger but no record store: %T does not implement backend.Records", b.Capabilities().Name, b)
	}
	return r
}

func createReq(name string, seq int64, value string, o backend.Owner) backend.CreateRecordRequest {
	return backend.CreateRecordRequest{Name: name, Seq: seq, Value: value, Owner: o}
}

// sameRecord reports whether got is want as stored (Expires an Instant).
func sameRecord(got, want backend.Record) bool {
	return got.Name == want.Name && got.Seq == want.Seq && got.Value == want.Value &&
		got.Owner == want.Owner && got.Expires.Equal(want.Expires) &&
		(got.Expires.IsZero() || got.Expires.Location() == time.UTC)
}

// checkRecordOneWinner: of many concurrent creates of one (name, seq), by
// different owners, exactly one stores its record; every other is told
// that record, and the store holds it.
func checkRecordOneWinner(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	const n = 32
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []backend.Record
		told    []backend.Record
		other   []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := createReq("job/version", 1700000000000, fmt.Sprintf("v%d", i), owner(fmt.Sprintf("i%d", i)))
			r, mine, err := rs.CreateRecord(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				other = append(other, err)
			case mine:
				if !sameRecord(r, backend.Record{Name: req.Name, Seq: req.Seq, Value: req.Value, Owner: req.Owner}) {
					t.Errorf("the winning create returned %+v, not its own record %+v", r, req)
				}
				winners = append(winners, r)
			default:
				told = append(told, r)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected create errors: %v", other)
	}
	if len(winners) != 1 {
		t.Fatalf("%d winners among %d concurrent creates of one record, want exactly 1", len(winners), n)
	}
	for _, r := range told {
		if !sameRecord(r, winners[0]) {
			t.Errorf("a losing create was told %+v, want the winner's %+v", r, winners[0])
		}
	}
	got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "job/version"})
	mustNil(t, err, "ListRecords")
	if len(got) != 1 || !sameRecord(got[0], winners[0]) {
		t.Fatalf("the store holds %+v, want exactly the winner %+v", got, winners[0])
	}
}

// checkRecordRetry: a create retried with its owner nonce (its first reply
// lost) is answered "yours" with the record as first stored, even if the
// retry's value differs; the same instance with another nonce is another
// owner.
func checkRecordRetry(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	a := owner("a")
	first, mine, err := rs.CreateRecord(ctx, createReq("pause", 7, "paused", a))
	mustNil(t, err, "CreateRecord")
	if !mine {
		t.Fatalf("the first create of a free place was not the creator's: %+v", first)
	}
	again, mine, err := rs.CreateRecord(ctx, createReq("pause", 7, "resumed", a))
	mustNil(t, err, "CreateRecord retried")
	if !mine || !sameRecord(again, first) {
		t.Fatalf("a retried create = %+v, mine=%v; want the first record %+v, mine", again, mine, first)
	}
	b := backend.Owner{Instance: a.Instance, Nonce: backend.NewNonce()}
	other, mine, err := rs.CreateRecord(ctx, createReq("pause", 7, "resumed", b))
	mustNil(t, err, "CreateRecord by the same instance with another nonce")
	if mine || !sameRecord(other, first) {
		t.Fatalf("a create by another nonce of instance %q = %+v, mine=%v; want the first record, not mine", a.Instance, other, mine)
	}
}

// checkRecordList: ListRecords returns one name's records, greatest seq
// first, paged by Before and Limit, each exactly as created (any valid
// text, the longest value, Expires at millisecond precision in UTC).
func checkRecordList(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	long := strings.Repeat("é", backend.MaxRecordValueLen/2)
	exp := time.Now().Add(time.Hour).Add(123 * time.Microsecond)
	var want []backend.Record // greatest seq first
	for _, c := range []struct {
		seq     int64
		value   string
		expires time.Time
	}{
		{1<<62 + 3, "", time.Time{}},
		{1700000000123, "line one\nline two\t\x01 ✓ 日本", exp},
		{5, long, time.Time{}},
		{0, "zero", time.UnixMilli(0)}, // the earliest Expires: not "none"
	} {
		o := owner("lister")
		req := createReq("jobs/a:b version", c.seq, c.value, o)
		req.Expires = c.expires
		r, mine, err := rs.CreateRecord(ctx, req)
		mustNil(t, err, fmt.Sprintf("CreateRecord seq %d", c.seq))
		wantR := backend.Record{Name: req.Name, Seq: c.seq, Value: c.value, Owner: o}
		if !c.expires.IsZero() {
			wantR.Expires = backend.Instant(c.expires)
		}
		if !mine || !sameRecord(r, wantR) {
			t.Fatalf("CreateRecord seq %d = %+v, mine=%v; want %+v", c.seq, r, mine, wantR)
		}
		want = append(want, wantR)
	}
	// Names that one store must keep apart: a prefix, an extension, a
	// name with the same bytes across a separator.
	for _, n := range []string{"jobs/a:b", "jobs/a:b version2", "jobs/a", "jobs/a:b versio"} {
		_, _, err := rs.CreateRecord(ctx, createReq(n, 5, "other name", owner("x")))
		mustNil(t, err, "CreateRecord of "+n)
	}
	list := func(req backend.ListRecordsRequest) []backend.Record {
		t.Helper()
		got, err := rs.ListRecords(ctx, req)
		mustNil(t, err, fmt.Sprintf("ListRecords %+v", req))
		return got
	}
	expect := func(what string, got, want []backend.Record) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d records (%+v), want %d", what, len(got), brief(got), len(want))
		}
		for i := range got {
			if !sameRecord(got[i], want[i]) {
				t.Fatalf("%s: record %d is %+v, want %+v", what, i, brief(got[i:i+1]), brief(want[i:i+1]))
			}
		}
	}
	name := "jobs/a:b version"
	expect("ListRecords", list(backend.ListRecordsRequest{Name: name}), want)
	expect("ListRecords limit 2", list(backend.ListRecordsRequest{Name: name, Limit: 2}), want[:2])
	expect("ListRecords before the second", list(backend.ListRecordsRequest{Name: name, Before: want[1].Seq}), want[2:])
	expect("ListRecords before 1", list(backend.ListRecordsRequest{Name: name, Before: 1}), want[3:])
	expect("ListRecords of a name never written", list(backend.ListRecordsRequest{Name: "never"}), nil)
}

// brief shortens long values for messages.
func brief(rs []backend.Record) []backend.Record {
	out := make([]backend.Record, len(rs))
	for i, r := range rs {
		if len(r.Value) > 40 {
			r.Value = fmt.Sprintf("%.40s… (%d bytes)", r.Value, len(r.Value))
		}
		out[i] = r
	}
	return out
}

// checkRecordDelete: only the creator (instance and nonce) deletes a
// record; anyone else, or a repeat, is answered ErrNotFound and changes
// nothing; the place is then free for a new create.
func checkRecordDelete(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	a := owner("a")
	first, _, err := rs.CreateRecord(ctx, createReq("trigger/k", 1, "pending", a))
	mustNil(t, err, "CreateRecord")
	for _, o := range []backend.Owner{owner("b"), {Instance: a.Instance, Nonce: backend.NewNonce()}, {Instance: "b", Nonce: a.Nonce}} {
		err := rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "trigger/k", Seq: 1, Owner: o})
		mustIs(t, err, backend.ErrNotFound, fmt.Sprintf("DeleteRecord by %v", o))
	}
	mustIs(t, rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "trigger/k", Seq: 2, Owner: a}), backend.ErrNotFound, "DeleteRecord of an empty seq")
	got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "trigger/k"})
	mustNil(t, err, "ListRecords")
	if len(got) != 1 || !sameRecord(got[0], first) {
		t.Fatalf("after deletes by others the store holds %+v, want %+v", got, first)
	}
	mustNil(t, rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "trigger/k", Seq: 1, Owner: a}), "DeleteRecord by its creator")
	mustIs(t, rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "trigger/k", Seq: 1, Owner: a}), backend.ErrNotFound, "DeleteRecord repeated")
	got, err = rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "trigger/k"})
	mustNil(t, err, "ListRecords after the delete")
	if len(got) != 0 {
		t.Fatalf("after its creator's delete the store holds %+v", got)
	}
	b := owner("b")
	r, mine, err := rs.CreateRecord(ctx, createReq("trigger/k", 1, "again", b))
	mustNil(t, err, "CreateRecord after the delete")
	if !mine || r.Owner != b {
		t.Fatalf("a create of a deleted place = %+v, mine=%v; want b's", r, mine)
	}
}

// checkRecordPrune: PruneRecords deletes, a batch at a time, the records
// whose Expires is before its bound, and nothing else.
func checkRecordPrune(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	now := time.Now()
	var keep []string
	for i, exp := range []time.Time{now.Add(-3 * time.Hour), {}, time.UnixMilli(0), now.Add(time.Hour), now.Add(-time.Hour), {}} {
		req := createReq(fmt.Sprintf("prune/%d", i), int64(i), "v", owner("p"))
		req.Expires = exp
		_, _, err := rs.CreateRecord(ctx, req)
		mustNil(t, err, "CreateRecord")
		if exp.IsZero() || exp.After(now) {
			keep = append(keep, req.Name)
		}
	}
	n, err := rs.PruneRecords(ctx, now, 2)
	mustNil(t, err, "PruneRecords")
	if n != 2 {
		t.Fatalf("PruneRecords batch 2 deleted %d of 3 expired records, want 2", n)
	}
	n, err = rs.PruneRecords(ctx, now, 2)
	mustNil(t, err, "PruneRecords again")
	if n != 1 {
		t.Fatalf("the second PruneRecords deleted %d, want the last expired one", n)
	}
	n, err = rs.PruneRecords(ctx, now, 2)
	mustNil(t, err, "PruneRecords a third time")
	if n != 0 {
		t.Fatalf("a PruneRecords with nothing expired deleted %d", n)
	}
	for i := range 6 {
		name := fmt.Sprintf("prune/%d", i)
		got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: name})
		mustNil(t, err, "ListRecords "+name)
		kept := false
		for _, k := range keep {
			kept = kept || k == name
		}
		if kept != (len(got) == 1) {
			t.Errorf("record %s: %d left after pruning, want kept=%v", name, len(got), kept)
		}
	}
}

// checkRecordBadInput: bad arguments are ErrInvalid naming the field, and
// nothing is stored.
func checkRecordBadInput(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	o := owner("bad")
	cases := []struct {
		field string
		call  func() error
	}{
		{"record name", func() error { _, _, err := rs.CreateRecord(ctx, createReq("", 1, "v", o)); return err }},
		{"record name", func() error { _, _, err := rs.CreateRecord(ctx, createReq("bad\x00name", 1, "v", o)); return err }},
		{"record name", func() error {
			_, _, err := rs.CreateRecord(ctx, createReq(strings.Repeat("n", backend.MaxKeyLen+1), 1, "v", o))
			return err
		}},
		{"record seq", func() error { _, _, err := rs.CreateRecord(ctx, createReq("bad", -1, "v", o)); return err }},
		{"record value", func() error { _, _, err := rs.CreateRecord(ctx, createReq("bad", 1, "a\x00b", o)); return err }},
		{"record value", func() error { _, _, err := rs.CreateRecord(ctx, createReq("bad", 1, "a\xffb", o)); return err }},
		{"record value", func() error {
			_, _, err := rs.CreateRecord(ctx, createReq("bad", 1, strings.Repeat("v", backend.MaxRecordValueLen+1), o))
			return err
		}},
		{"owner nonce", func() error {
			_, _, err := rs.CreateRecord(ctx, createReq("bad", 1, "v", backend.Owner{Instance: "bad"}))
			return err
		}},
		{"record expires", func() error {
			req := createReq("bad", 1, "v", o)
			req.Expires = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			_, _, err := rs.CreateRecord(ctx, req)
			return err
		}},
		{"record name", func() error { _, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "\x7f"}); return err }},
		{"record listing before", func() error {
			_, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "bad", Before: -1})
			return err
		}},
		{"record seq", func() error {
			return rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "bad", Seq: -5, Owner: o})
		}},
		{"prune batch", func() error { _, err := rs.PruneRecords(ctx, time.Now(), 0); return err }},
		{"prune olderThan", func() error { _, err := rs.PruneRecords(ctx, time.Time{}, 10); return err }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("bad %s: got %v, want ErrInvalid naming %q", c.field, err, c.field)
		}
	}
	got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "bad"})
	mustNil(t, err, "ListRecords")
	if len(got) != 0 {
		t.Fatalf("bad creates stored %+v", got)
	}
}

// checkRecordEndedContext: a record call whose context ended answers with
// the context's error, never with its cause as if the store had said it;
// a create that says it was not applied stored nothing.
func checkRecordEndedContext(t T, e *env) {
	rs, ctx := e.newRecords(t), e.ctx()
	a := owner("a")
	_, _, err := rs.CreateRecord(ctx, createReq("held", 1, "v", a))
	mustNil(t, err, "CreateRecord")
	ended, cancel := context.WithCancelCause(ctx)
	cancel(backend.ErrNotFound)
	calls := []struct {
		what string
		call func() error
	}{
		{"CreateRecord of a free place", func() error {
			_, _, err := rs.CreateRecord(ended, createReq("free", 1, "v", owner("b")))
			if errors.Is(err, backend.ErrNotApplied) {
				if got, lerr := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "free"}); lerr != nil || len(got) != 0 {
					t.Errorf("CreateRecord with an ended context said not applied (%v), yet the store holds %+v, %v", err, got, lerr)
				}
			}
			return err
		}},
		{"DeleteRecord", func() error {
			return rs.DeleteRecord(ended, backend.DeleteRecordRequest{Name: "held", Seq: 1, Owner: a})
		}},
		{"ListRecords", func() error { _, err := rs.ListRecords(ended, backend.ListRecordsRequest{Name: "held"}); return err }},
		{"PruneRecords", func() error { _, err := rs.PruneRecords(ended, time.Now(), 10); return err }},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s with an ended context succeeded", c.what)
		case definiteAnswer(err) != nil:
			t.Errorf("%s with a context cancelled with cause ErrNotFound: %v, which matches %v: the cause is not the store's answer", c.what, err, definiteAnswer(err))
		case !errors.Is(err, context.Canceled):
			t.Errorf("%s with a cancelled context: %v, want an error matching context.Canceled", c.what, err)
		}
	}
}

// checkRecordsApartFromRuns: records and runs are two stores: a record
// named like a job is no run of it (no listing, GetRun or high-water mark
// shows it), a run is no record, and Prune and PruneRecords each touch
// only their own.
func checkRecordsApartFromRuns(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	rs, ok := b.(backend.Records)
	if !ok {
		t.Fatalf("backend %q keeps a run ledger but no record store", b.Capabilities().Name)
	}
	at := past(time.Hour)
	o := owner("a")
	req := createReq("alpha", at.UnixMilli(), "a record", o)
	req.Expires = past(time.Minute)
	_, _, err := rs.CreateRecord(ctx, req)
	mustNil(t, err, "CreateRecord")
	if runs, err := b.ListRuns(ctx, backend.RunFilter{}); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns{} after a record was created = %+v, %v; want no runs", runs, err)
	}
	if runs, err := b.ListRuns(ctx, backend.RunFilter{Job: "alpha"}); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns{Job: alpha} = %+v, %v; want no runs", runs, err)
	}
	if r, err := b.GetRun(ctx, "alpha", at); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("GetRun(alpha) = %+v, %v; want ErrNotFound", r, err)
	}
	if hw, _, err := b.HighWater(ctx, "alpha"); err != nil || !hw.IsZero() {
		t.Fatalf("HighWater(alpha) = %v, %v; want none", hw, err)
	}
	ttl := e.ttl(30 * time.Second)
	g, err := b.Claim(ctx, claimReq("beta", at, o, ttl))
	mustNil(t, err, "Claim")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "beta", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
	if got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "beta"}); err != nil || len(got) != 0 {
		t.Fatalf("ListRecords(beta) after a run of job beta = %+v, %v; want none", got, err)
	}
	// Prune of runs leaves the expired record; PruneRecords leaves the
	// finished run.
	n, err := b.Prune(ctx, time.Now().Add(time.Hour), 100)
	mustNil(t, err, "Prune")
	if n != 1 {
		t.Fatalf("Prune deleted %d, want the one finished run", n)
	}
	if got, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "alpha"}); err != nil || len(got) != 1 {
		t.Fatalf("after Prune of runs, ListRecords(alpha) = %+v, %v; want the record", got, err)
	}
	g, err = b.Claim(ctx, claimReq("gamma", at, o, ttl))
	mustNil(t, err, "Claim gamma")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "gamma", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish gamma")
	n, err = rs.PruneRecords(ctx, time.Now(), 100)
	mustNil(t, err, "PruneRecords")
	if n != 1 {
		t.Fatalf("PruneRecords deleted %d, want the one expired record", n)
	}
	if r, err := b.GetRun(ctx, "gamma", at); err != nil || r.State != backend.Succeeded {
		t.Fatalf("after PruneRecords, GetRun(gamma) = %+v, %v; want the finished run", r, err)
	}
}
