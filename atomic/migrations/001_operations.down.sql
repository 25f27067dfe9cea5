DROP TABLE IF EXISTS {{atomic_operations}};
