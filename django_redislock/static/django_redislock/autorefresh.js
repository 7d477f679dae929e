/* Held locks change list: optional auto-refresh, off until the user ticks the box.
   The choice is kept for the browser tab (sessionStorage). The page is not reloaded
   while locks are selected or the search box has focus. No dependencies. */
'use strict';
{
    const box = document.getElementById('heldlock-autorefresh');
    if (box) {
        const storageKey = 'django_redislock.autorefresh';
        const seconds = Math.max(2, Number(box.dataset.seconds) || 10);
        let timer = null;

        const busy = function() {
            return document.querySelector('input.action-select:checked') !== null ||
                document.activeElement === document.getElementById('searchbar');
        };
        const schedule = function() {
            window.clearTimeout(timer);
            if (!box.checked) {
                return;
            }
            timer = window.setTimeout(function() {
                if (busy()) {
                    schedule();
                } else {
                    window.location.reload();
                }
            }, seconds * 1000);
        };

        box.checked = window.sessionStorage.getItem(storageKey) === '1';
        box.addEventListener('change', function() {
            window.sessionStorage.setItem(storageKey, box.checked ? '1' : '0');
            schedule();
        });
        schedule();
    }
}
