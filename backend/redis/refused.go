package redis

import (
	"context"
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// Refusals. A server that refuses a command for want of permission answers
// NOPERM (an ACL without the command, key or channel), NOAUTH or WRONGPASS;
// before the command ran: nothing of it was applied. A command of a script
// that the ACL refuses fails the script with an ERR saying the user "can't
// run" or "can't access" it: the script's earlier writes stay. Both are
// marked backend.ErrRefused (the first also backend.ErrNotApplied) by a
// hook on the client, so that a Locker reports a refusal at once instead
// of retrying it as an unknown outcome. (The lease scripts grant with their
// last write, so a refused one grants nothing; the Locker still reports an
// in-script refusal as indeterminate, since it cannot know that.) A
// pipeline's own error is marked not applied only when each of its
// commands was refused before it ran.
type refusalHook struct{}

// refusal returns err marked as a refusal, or nil if it is not one.
func refusal(err error) error {
	var re goredis.Error
	if err == nil || !errors.As(err, &re) || errors.Is(err, backend.ErrRefused) {
		return nil
	}
	msg := err.Error()
	for _, p := range []string{"NOPERM", "NOAUTH", "WRONGPASS"} {
		if strings.HasPrefix(msg, p) {
			return backend.Refused(err, true)
		}
	}
	if strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "The user executing the script can't") {
		return backend.Refused(err, false)
	}
	return nil
}

func (refusalHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (refusalHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if r := refusal(err); r != nil {
			cmd.SetErr(r)
			return r
		}
		return err
	}
}

func (refusalHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		// A pipeline is not one request: the commands before a refused one
		// ran. The pipeline's error is "not applied" only if every command
		// was refused before it ran.
		none := true
		for _, cmd := range cmds {
			if r := refusal(cmd.Err()); r != nil {
				cmd.SetErr(r)
			}
			if !errors.Is(cmd.Err(), backend.ErrNotApplied) {
				none = false
			}
		}
		if r := refusal(err); r != nil {
			if !none {
				return backend.Refused(err, false)
			}
			return r
		}
		return err
	}
}
