package conformance

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// explain tells, for each partition porcupine could not linearize, the end
// of the longest linearization it found, the model's states after it, and
// the operations that could not follow: where the backend left the model.
func explain(m porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := m.Partition(ops)
	lins := info.PartialLinearizationsOperations()
	var b strings.Builder
	for p, part := range parts {
		if p >= len(lins) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range lins[p] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(part) {
			continue
		}
		state := m.Init()
		for _, op := range longest {
			_, state = m.Step(state, op.Input, op.Output)
		}
		fmt.Fprintf(&b, "\n  partition %d: %d of %d operations linearized; the last of them:", p, len(longest), len(part))
		for _, op := range longest[max(0, len(longest)-6):] {
			fmt.Fprintf(&b, "\n    [%s] %s", span(op), m.DescribeOperation(op.Input, op.Output))
		}
		fmt.Fprintf(&b, "\n  model state then: %s\n  operations that cannot come next:", m.DescribeState(state))
		done := map[porcupine.Operation]bool{}
		for _, op := range longest {
			done[op] = true
		}
		var rest []porcupine.Operation
		for _, op := range part {
			if !done[op] {
				rest = append(rest, op)
			}
		}
		sort.Slice(rest, func(i, j int) bool { return rest[i].Return < rest[j].Return })
		for _, op := range rest[:min(len(rest), 4)] {
			fmt.Fprintf(&b, "\n    [%s] client %d: %s", span(op), op.ClientId, m.DescribeOperation(op.Input, op.Output))
		}
		if len(rest) == 0 {
			continue
		}
		// The history around the first of them, linearized or not.
		var near []porcupine.Operation
		for _, op := range part {
			if op.Call <= rest[0].Return {
				near = append(near, op)
			}
		}
		sort.Slice(near, func(i, j int) bool { return near[i].Call < near[j].Call })
		fmt.Fprintf(&b, "\n  the history up to there (its last 12 sent):")
		for _, op := range near[max(0, len(near)-12):] {
			fmt.Fprintf(&b, "\n    [%s] client %d: %s", span(op), op.ClientId, m.DescribeOperation(op.Input, op.Output))
		}
	}
	return b.String()
}

// span is an operation's interval in milliseconds of the run.
func span(op porcupine.Operation) string {
	return fmt.Sprintf("%.1f–%.1f ms", float64(op.Call)/1e6, float64(op.Return)/1e6)
}
