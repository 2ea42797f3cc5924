// Command leader-consumer consumes a NATS JetStream subject only while it
// is the elected leader, and sends each notification once.
//
// Run several copies against one backend; only the leader consumes. If it
// dies, another is elected and continues from the durable consumer's
// position. A message that was sent but not yet acknowledged when the leader
// died is delivered again; the notification's claim in the run ledger
// (keyed by the message's Nats-Msg-Id) is what stops it from being sent
// twice: a finished claim is never claimed again.
//
// The "e-mail" here is a line appended to an outbox file. A real sender
// would pass the claim's fencing token (or the message id as an idempotency
// key) to the mail API, which is what makes the effect exactly-once even
// when a paused leader wakes after its claim was taken over.
//
//	go run ./leader-consumer --backend /tmp/lh.db --outbox /tmp/outbox --instance a
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/schedule"
)

// Options configure a consumer.
type Options struct {
	NATS     string // server URL
	Stream   string // JetStream stream name
	Subject  string // subjects the stream captures
	Instance string
	Outbox   string // file the notifications are "sent" to
	Log      *slog.Logger
}

func main() {
	var o Options
	dbPath := flag.String("backend", "leasehold.db", "SQLite file shared by the consumers")
	flag.StringVar(&o.NATS, "nats", nats.DefaultURL, "NATS server URL")
	flag.StringVar(&o.Stream, "stream", "NOTIFY", "JetStream stream")
	flag.StringVar(&o.Subject, "subject", "notify.>", "subjects of the stream")
	flag.StringVar(&o.Instance, "instance", fmt.Sprint("consumer-", os.Getpid()), "this instance's name")
	flag.StringVar(&o.Outbox, "outbox", "outbox.txt", "where notifications are sent")
	flag.Parse()
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := sqlite.Open(ctx, *dbPath)
	if err != nil {
		o.Log.Error("backend", "err", err)
		os.Exit(1)
	}
	defer b.Close()
	if err := Run(ctx, b, o); err != nil {
		o.Log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

// Run campaigns for leadership and consumes while leading, until ctx ends.
func Run(ctx context.Context, b backend.Backend, o Options) error {
	nc, err := nats.Connect(o.NATS)
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.NATS, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: o.Stream, Subjects: []string{o.Subject}}); err != nil {
		return fmt.Errorf("stream %s: %w", o.Stream, err)
	}
	el, err := leasehold.NewElector(b, "notifications/consumer", leasehold.Callbacks{
		OnElected: func(t leasehold.Token) { o.Log.Info("elected: consuming", "instance", o.Instance, "token", t) },
		OnDemoted: func() { o.Log.Info("demoted: not consuming", "instance", o.Instance) },
	}, leasehold.WithInstance(o.Instance), leasehold.WithTTL(3*time.Second), leasehold.WithLogger(o.Log))
	if err != nil {
		return err
	}
	return el.Run(ctx, func(leaderCtx context.Context) error {
		err := consume(leaderCtx, js, b, o)
		if leaderCtx.Err() != nil {
			return nil // demoted or stopping: not an error
		}
		return err
	})
}

// consume fetches and sends notifications until leaderCtx ends.
func consume(ctx context.Context, js jetstream.JetStream, b backend.Backend, o Options) error {
	cons, err := js.CreateOrUpdateConsumer(ctx, o.Stream, jetstream.ConsumerConfig{
		Durable: "mailer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(10, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for msg := range batch.Messages() {
			if ctx.Err() != nil {
				return nil // unacknowledged: redelivered to the next leader
			}
			if err := send(ctx, b, o, msg); err != nil {
				o.Log.Warn("not sent; will be redelivered", "err", err)
				_ = msg.Nak()
				continue
			}
			_ = msg.Ack()
		}
	}
	return nil
}

// send sends one notification at most once: schedule.RunOnce claims the
// message id in the ledger before sending and records the outcome after,
// so a redelivery of a sent (or failed) message is acknowledged unsent.
func send(ctx context.Context, b backend.Backend, o Options, msg jetstream.Msg) error {
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		id = "seq-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	err := schedule.RunOnce(ctx, b, "notify/"+id, func(ctx context.Context, token leasehold.Token) error {
		f, err := os.OpenFile(o.Outbox, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%s %s %s %s\n", id, token, o.Instance, msg.Data())
		return err
	}, schedule.OnceOptions{Claim: schedule.ClaimOptions{Instance: o.Instance}})
	var claimed *backend.ClaimedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &claimed) && claimed.Run.State == backend.Succeeded:
		o.Log.Info("already sent; acknowledging the redelivery", "id", id)
		return nil
	case errors.As(err, &claimed) && claimed.Run.State == backend.Failed, errors.Is(err, schedule.ErrOnceFailed):
		// At most once: a failed send is not retried (a real consumer
		// would dead-letter it here).
		o.Log.Error("sending failed once; not sent again", "id", id, "err", err)
		return nil
	case errors.As(err, &claimed) && claimed.Run.State == backend.Abandoned, errors.Is(err, schedule.ErrOnceAbandoned):
		// The consumer that claimed it died mid-send: maybe sent. At most
		// once: not sent again (a real consumer would dead-letter it).
		o.Log.Error("an earlier send died mid-way (maybe sent); not sent again", "id", id, "err", err)
		return nil
	default:
		// Held by another consumer now, or the backend did not answer:
		// not ours to send yet; the redelivery asks again.
		return err
	}
}
