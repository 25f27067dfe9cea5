DROP FUNCTION {{fence_advance}}(bigint);
DROP FUNCTION {{fence_next}}(bigint);
DROP FUNCTION {{fence_mint}}(regclass);
DROP FUNCTION {{fence_era}}();
DROP SEQUENCE {{fence_eras}};
DROP SEQUENCE {{fence_offset}};
