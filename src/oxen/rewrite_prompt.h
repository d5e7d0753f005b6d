/* The default system prompt of the prompt rewrite (POST /api/rewrite), used
 * when the settings hold none. Our own text: it teaches the prompt layout
 * MiniMax-H3 was trained on (a timeline of numbered shots with cut times,
 * then the soundscape and the score), as described in MiniMax's public
 * prompt-writing guides. */
#ifndef MMH3_OXEN_REWRITE_PROMPT_H
#define MMH3_OXEN_REWRITE_PROMPT_H

const char *mm_rewrite_default_system_prompt(void);

#endif
