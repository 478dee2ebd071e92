-- Issue 32: the render options took o!rdr's names (domain/render.rs), and two more can be denied
-- (`show_scoreboard`, `show_avatars_on_scoreboard`: reads from osu! per render). The check
-- widens to the new names and keeps the old ones, so nothing is rewritten: a key stored with
-- `motion_blur`, `storyboard` or `video` reads as `motion_blur_960fps`, `load_storyboard`,
-- `load_video` (DeniableOption::parse takes either), and the previous release reads its own
-- names as before (a new name it does not know it ignores, V16).
ALTER TABLE api_keys DROP CONSTRAINT api_keys_denied_options_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_denied_options_check
    CHECK (denied_options <@ ARRAY['motion_blur', 'storyboard', 'video', 'skin',
                                   'motion_blur_960fps', 'load_storyboard', 'load_video',
                                   'show_scoreboard', 'show_avatars_on_scoreboard']);
