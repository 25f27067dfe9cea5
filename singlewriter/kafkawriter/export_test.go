package kafkawriter

// EntityName exposes the progress and lock naming to the tests.
var EntityName = entityName
