-- A player ban keeps the name as the operator typed it, which `bans list` shows: bans compare
-- names by their confusable skeleton, computed by each instance when it reads the policy
-- (functions/core/src/domain/text.rs), not by the stored text. Loosening only: the previous
-- release reads a name in any case (it lowercases what it reads) and still writes lowercase.
ALTER TABLE bans DROP CONSTRAINT bans_check2;
ALTER TABLE bans ADD CONSTRAINT bans_player_check
    CHECK ((kind = 'player') = (player IS NOT NULL) AND char_length(player) BETWEEN 1 AND 64);
