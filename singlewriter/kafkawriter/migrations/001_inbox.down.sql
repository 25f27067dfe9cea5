DROP TABLE {{inbox_offsets}};
