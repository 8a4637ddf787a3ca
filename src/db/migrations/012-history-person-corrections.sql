-- An operator may split sightings off into a new person (a group that took in
-- someone else): the one change history allows, to person_id alone. Deleting
-- stays refused through the parent and on every partition; an update that
-- changes anything but person_id is refused row by row (the row trigger is
-- cloned to every partition, present and future).
CREATE FUNCTION history_changes_person_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (to_jsonb(NEW) - 'person_id') IS DISTINCT FROM (to_jsonb(OLD) - 'person_id') THEN
    RAISE EXCEPTION 'camera history is append-only (% on %)', TG_OP, TG_TABLE_NAME;
  END IF;
  RETURN NEW;
END
$$;

DROP TRIGGER sightings_append_only ON sightings;
DROP TRIGGER sightings_append_only_rows ON sightings;
CREATE TRIGGER sightings_append_only BEFORE DELETE ON sightings
  FOR EACH STATEMENT EXECUTE FUNCTION history_is_append_only();
CREATE TRIGGER sightings_append_only_rows BEFORE DELETE ON sightings
  FOR EACH ROW EXECUTE FUNCTION history_is_append_only();
CREATE TRIGGER sightings_person_only BEFORE UPDATE ON sightings
  FOR EACH ROW EXECUTE FUNCTION history_changes_person_only();
