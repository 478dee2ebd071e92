-- Wide networks (DESIGN.md §3, "Fair share"): an anonymous job records the wider block around
-- its client's network too (IPv4 /16, IPv6 /32 by default), so one actor with many cheap
-- networks of one allocation (the /48s a tunnel broker gives away from its /32) is capped as
-- one wide network. Jobs admitted before it have none and count toward no wide network's cap.
--
-- ADD COLUMN takes the table's strongest lock first, so the index after it upgrades nothing.
-- admit_job (sql/functions/) stores the column and counts the cap, under its global lock.

ALTER TABLE jobs ADD COLUMN client_wide_network text;

-- An anonymous wide network's active jobs, for its cap (at most MAX_ACTIVE_PER_WIDE_NETWORK
-- rows each), as jobs_active_by_network serves the network's.
CREATE INDEX jobs_active_by_wide_network ON jobs (client_wide_network)
    WHERE status IN ('queued', 'downloading', 'rendering') AND client_wide_network IS NOT NULL;
