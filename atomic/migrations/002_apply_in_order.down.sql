DROP FUNCTION IF EXISTS {{atomic_apply_in_order}}(bigint[], int2[], int4[], bigint[], bigint[], int4[], bigint[], bigint[]);
