-- Two holes a writer with the editor's grants could use in the trail of migration 0023.
--
-- 1. An audit row's id is the server's, always. The editor may insert into cron_audit (the
--    CLI's actions that change no definition write their row directly), and could pick ids:
--    the largest BIGINT moved AUTO_INCREMENT to its end, and every later audited change
--    (sqlcron pause, a node applying its TOML) failed with "Out of range value". The trigger
--    that sets db_user now also clears the id, so AUTO_INCREMENT gives it.
-- 2. A claim is taken as written only when it holds the list of the columns the server saw
--    change, as the server writes it (`command,env,run_user`): "commander" no longer covers
--    command, nor "environment" env, nor "run_user-policy" run_user. A claimed
--    insert or delete always says what the server saw ("an insert", "a delete"), so a claim
--    called `pause` cannot pass off a new job or a removed one.

DROP TRIGGER cron_audit_db_user_insert;

CREATE TRIGGER cron_audit_db_user_insert BEFORE INSERT ON cron_audit FOR EACH ROW
BEGIN
    SET NEW.id = NULL;
    SET NEW.db_user = USER();
END;

DROP TRIGGER cron_audit_db_user_update;

CREATE TRIGGER cron_audit_db_user_update BEFORE UPDATE ON cron_audit FOR EACH ROW
BEGIN
    SET NEW.id = OLD.id;
    SET NEW.db_user = USER();
END;

DROP PROCEDURE cron_audit_record;

CREATE PROCEDURE cron_audit_record(IN sql_action VARCHAR(32), IN row_name VARCHAR(191), IN changed TEXT, IN marker TEXT)
BEGIN
    DECLARE said TEXT DEFAULT NULL;
    DECLARE seen TEXT DEFAULT NULL;
    DECLARE named BOOLEAN DEFAULT TRUE;
    IF changed IS NOT NULL THEN
        SET seen = CONCAT('changed ', changed);
    ELSEIF sql_action LIKE '%insert' THEN
        SET seen = 'an insert';
    ELSEIF sql_action LIKE '%delete' THEN
        SET seen = 'a delete';
    END IF;
    IF marker IS NOT NULL AND marker <> '' AND @sqlcron_claim IS NOT NULL AND JSON_VALID(@sqlcron_claim)
        AND CAST(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.marker')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.marker')), NULL) AS BINARY) <=> CAST(marker AS BINARY) THEN
        SET said = IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.detail')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.detail')), NULL);
        -- An update's claim that holds the server's own list word for word ("changed
        -- command,env") is taken as is.
        SET named = changed IS NOT NULL AND said IS NOT NULL
            AND LOCATE(CAST(changed AS BINARY), CAST(said AS BINARY)) > 0;
        INSERT INTO cron_audit (at, action, job, who, host, pid, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                LEFT(COALESCE(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.action')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.action')), NULL), sql_action), 32),
                row_name,
                LEFT(COALESCE(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.who')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.who')), NULL), 'sql'), 255),
                LEFT(IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.host')) = 'STRING', JSON_UNQUOTE(JSON_EXTRACT(@sqlcron_claim, '$.host')), NULL), 255),
                IF(JSON_TYPE(JSON_EXTRACT(@sqlcron_claim, '$.pid')) = 'INTEGER', CAST(JSON_EXTRACT(@sqlcron_claim, '$.pid') AS SIGNED), NULL),
                CASE WHEN said IS NULL THEN seen
                     WHEN seen IS NULL THEN said
                     WHEN changed IS NOT NULL AND named THEN said
                     ELSE CONCAT(said, ' (the database saw: ', seen, ')') END);
        SET @sqlcron_recorded = marker;
    ELSE
        INSERT INTO cron_audit (at, action, job, who, detail)
        VALUES (CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), sql_action, row_name, 'sql',
                IF(changed IS NULL, CONCAT('database user ', USER()), CONCAT(seen, ' (database user ', USER(), ')')));
    END IF;
END;
