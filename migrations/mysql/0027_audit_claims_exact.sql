-- A claim whose text held the server's own column list anywhere was taken as written
-- (migration 0024 compared with LOCATE), so a writer could put the list inside a longer text
-- ("reason: nothing, changed command,env was a typo") and no list was appended after it. An
-- update's claim is now taken as is only when it is exactly "changed " and the list; any
-- other text is followed by "(the database saw: changed ...)".

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
        -- An update's claim is taken as is only when it is the server's own words,
        -- exactly ("changed command,env"); anything else gets the list appended.
        SET named = changed IS NOT NULL AND said IS NOT NULL
            AND CAST(said AS BINARY) = CAST(seen AS BINARY);
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
