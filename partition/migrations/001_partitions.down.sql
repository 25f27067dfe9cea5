DROP TABLE {{partition_owners}};
DROP TABLE {{partition_members}};
DROP SEQUENCE {{partition_incarnations}};
