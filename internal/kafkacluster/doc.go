// Package kafkacluster holds the fault tests of singlewriter/kafkawriter on a
// three-broker Kafka cluster (replication factor 3, min.insync.replicas 2)
// that scripts/kafka.sh runs: a partition leader killed, a zombie consumer
// stopped past its session timeout, a consumer cut off from the brokers or
// from PostgreSQL, a rolling restart and a rebalance storm, each under a
// steady stream of events. Each test checks that every record of the topic
// was applied exactly once and in partition order, and that no acknowledged
// event was lost.
//
// It has no code of its own: `make test-kafka-cluster` runs its tests, after
// the rest (they kill and restart brokers, so they run one at a time), and
// scripts/kafka-faults.sh turns their figures into the table of
// docs/singlewriter.md, "Faults on a Kafka cluster".
package kafkacluster
