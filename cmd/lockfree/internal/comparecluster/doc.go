// Package comparecluster runs `lockfree compare --faults broker-kill` on a
// real three-node Kafka cluster (internal/testkafka's, started by
// scripts/kafka.sh): the broker that leads a run's topic is killed mid-run
// and started again once another leads it. It has no code outside its
// tests.
package comparecluster
