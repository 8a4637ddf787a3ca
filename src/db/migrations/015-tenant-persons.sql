-- Person ids belong to a tenant. A client may name a person by its own id
-- (PUT person_id), so an id one tenant uses must be as free to every other
-- tenant as an unused one: no answer may tell that another tenant holds it,
-- and none may keep another tenant from using it. Persons are keyed by
-- (tenant, id), and everything that names a person names it with its tenant.
-- Ids held today stay as they are; ids drawn by the service still come from
-- one sequence, so they never meet within a tenant.
ALTER TABLE faces DROP CONSTRAINT faces_person_fk;
ALTER TABLE sightings DROP CONSTRAINT sightings_person_id_fkey;
ALTER TABLE persons DROP CONSTRAINT persons_merged_into_fkey;
ALTER TABLE persons DROP CONSTRAINT persons_pkey;

ALTER TABLE persons ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE persons ADD CONSTRAINT persons_merged_into_fkey FOREIGN KEY (tenant_id, merged_into) REFERENCES persons (tenant_id, id);
ALTER TABLE faces ADD CONSTRAINT faces_person_fk FOREIGN KEY (tenant_id, person_id) REFERENCES persons (tenant_id, id);
ALTER TABLE sightings ADD CONSTRAINT sightings_person_id_fkey FOREIGN KEY (tenant_id, person_id) REFERENCES persons (tenant_id, id);

DROP INDEX persons_merged_into;
CREATE INDEX persons_merged_into ON persons (tenant_id, merged_into) WHERE merged_into IS NOT NULL;
DROP INDEX faces_person;
CREATE INDEX faces_person ON faces (tenant_id, person_id, id) WHERE person_id IS NOT NULL;
