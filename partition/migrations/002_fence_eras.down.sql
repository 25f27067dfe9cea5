-- Back to plain incarnations. partition_incarnations starts above every
-- incarnation minted in an era: none exceeds the highest era minted in
-- times 2^40 plus partition_incarnation_fences's last value. Epochs stay as
-- they are; epoch + 1 keeps them growing.
CREATE SEQUENCE {{partition_incarnations}} AS bigint NO CYCLE;
SELECT setval({{regclass partition_incarnations}},
	coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0) * 1099511627776 + last_value)
	FROM {{partition_incarnation_fences}};
DROP SEQUENCE {{partition_incarnation_fences}};
