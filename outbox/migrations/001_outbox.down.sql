DROP TABLE {{outbox_events}};
DROP TABLE {{outbox_sequences}};
