-- A request to stop the run in progress (`sqlcron stop`, the dashboard): the fencing token of
-- the claim to stop. The holder sees it at its next lease extension, stops the run and records
-- it `stopped`; a later claim has another token, so an old request stops nothing.
ALTER TABLE cron_table ADD COLUMN stop_token BIGINT;
