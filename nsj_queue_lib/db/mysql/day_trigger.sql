-- An attempt's finished_day follows its status, whoever updates it: this
-- library's settles set it themselves (the trigger then changes nothing);
-- 1.2.2's workers and SQL by hand leave it to the trigger. The new key moves
-- the row to its partition. MySQL triggers have no WHEN: it runs on every
-- update, a CASE of a few comparisons.
CREATE TRIGGER {day_trigger}
BEFORE UPDATE ON {table}
FOR EACH ROW
SET NEW.finished_day = CASE
    WHEN NEW.status IN ('pendente', 'agendada', 'processando', 'aguardando') THEN 1
    WHEN NEW.finished_day = 1 THEN UNIX_TIMESTAMP(COALESCE(NEW.finished_at, NOW(6))) DIV 86400
    ELSE NEW.finished_day
END;
