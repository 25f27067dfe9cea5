DROP TABLE {{inbox_entities}};
DROP TABLE {{inbox_events}};
