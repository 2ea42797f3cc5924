// Package testkit is the home of the test-only helpers; what lives under
// it is for tests (and the lab, cmd/leasehold-lab), never for the product:
//
//   - testserver starts real coordination servers (redis-server, etcd,
//     ZooKeeper, PostgreSQL, MariaDB) as child processes for a test;
//   - faultbackend wraps a real backend and lets a test script a fault
//     (a delay, a lost reply, a refusal, a count) into any of its calls;
//   - eventually is the one way to wait for a condition: poll it until it
//     holds or a deadline passes, never a sleep that hopes;
//   - Buffer, in this package, is a goroutine-safe buffer for a log or a
//     process's output that the test reads while others write.
//
// The product binary cmd/leasehold links nothing under internal/testkit
// (cmd/leasehold's TestBinaryLinksNoLab and scripts/test check it).
package testkit
