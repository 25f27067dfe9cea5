DROP TABLE {{entity_progress}};
