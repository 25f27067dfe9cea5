DROP TABLE IF EXISTS {{occ_operations}};
